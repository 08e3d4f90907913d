from __future__ import annotations

from pathlib import Path

import pytest

from costapp.env import (
    EnvError,
    database_from_url,
    env_bool,
    env_int,
    env_mapping,
    env_str,
)

pytestmark = pytest.mark.smoke


def test_env_bool_refuses_junk_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("X_FLAG", "yes please")
    with pytest.raises(EnvError, match="X_FLAG='yes please'"):
        env_bool("X_FLAG")


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("off", False), ("TRUE", True)]
)
def test_env_bool_reads_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("X_FLAG", raw)
    assert env_bool("X_FLAG") is expected


def test_env_int_enforces_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_N", "0")
    with pytest.raises(EnvError, match="at least 1"):
        env_int("X_N", 5, minimum=1)


def test_secrets_can_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "s"
    secret.write_text("hunter2\n")
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert env_str("X_SECRET") == "hunter2"


def test_database_url_maps_postgres_and_sqlite(tmp_path: Path) -> None:
    pg = database_from_url(
        "postgres://u:p%40ss@db:5433/costapp?sslmode=require", base_dir=tmp_path
    )
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "costapp",
        "u",
        "p@ss",
        "db",
        "5433",
    )
    assert pg["OPTIONS"] == {"sslmode": "require"}
    lite = database_from_url("sqlite:///var/x.sqlite3", base_dir=tmp_path)
    assert lite["NAME"] == str(tmp_path / "var/x.sqlite3")


def test_database_url_refuses_an_unknown_scheme(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match="unsupported scheme 'mysql'"):
        database_from_url("mysql://x/y", base_dir=tmp_path)


def test_env_mapping_reads_pairs_and_refuses_junk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("X_HEADERS", "X-Scope-OrgID=team-a, Other=1")
    assert env_mapping("X_HEADERS") == {"X-Scope-OrgID": "team-a", "Other": "1"}
    monkeypatch.setenv("X_HEADERS", "justaword")
    with pytest.raises(EnvError, match="X_HEADERS='justaword'"):
        env_mapping("X_HEADERS")
