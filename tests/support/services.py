"""Helpers for tests that talk to real servers on loopback.

Under CI=true a missing binary or service fails the test with what is missing;
on a laptop it skips, so `pytest tests/analytics` works with nothing installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
ROOT = Path(__file__).resolve().parents[2]
PYTHON = (
    str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else "python"
)


def missing(what: str) -> None:
    """Fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"required for this test but missing: {what}", pytrace=False)
    pytest.skip(f"missing: {what}")


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if not path:
        missing(f"the {name!r} binary (scripts/test.sh installs it)")
    assert path is not None
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    check: Callable[[], bool], *, timeout: float = 30.0, what: str = "service"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def stop(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 10
) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database beside ``DATABASE_URL``'s (its URL),
    dropped afterwards: for subprocesses (gunicorn, workers, benchmarks) that
    cannot see pytest-django's test database."""
    import psycopg

    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        missing("DATABASE_URL pointing at PostgreSQL (scripts/test.sh sets it)")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin_url = base.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def other_session() -> Iterator[Any]:
    """A second connection to the test database (psycopg), committed when
    the block ends: a write from another session, which the test's own
    transaction or snapshot may or may not see."""
    import psycopg
    from django.db import connection

    s = connection.settings_dict
    with psycopg.connect(
        host=s["HOST"],
        port=s["PORT"] or 5432,
        user=s["USER"],
        password=s["PASSWORD"],
        dbname=s["NAME"],
    ) as other:
        yield other
