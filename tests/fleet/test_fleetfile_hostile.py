"""A hostile fleet file, through the paths a user takes (``fleet_load`` in
process and from the command line): refused with the file, the line and the
reason, nothing loaded, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from costapp.fleet.fleetfile import fleet_load
from costapp.models import AlertRule, Deployment, Pool
from costapp.yamlfile import SHOWN_PROBLEMS, FileProblems
from tests.support.hostile_yaml import alias_bomb

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "fleet.example.yaml"

HOSTILE = {
    "alias bomb": (alias_bomb(), "more than 100,000 values with every alias expanded"),
    "binary": (bytes(range(256)) * 4, "contains a NUL byte (at byte 0)"),
    "utf-16": (EXAMPLE.read_text().encode("utf-16"), "is UTF-16 text"),
    "10,000 levels of [": (b"pools: " + b"[" * 10_000 + b"]" * 10_000, "depth"),
    "40 levels of {": (b"pools: " + b"{a: " * 40 + b"1" + b"}" * 40, "nested more"),
}


def _write(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_command_refuses_a_hostile_file_naming_file_line_and_reason(
    tmp_path: Path, name: str
) -> None:
    content, said = HOSTILE[name]
    call_command("fleet_load", str(EXAMPLE))
    before = (
        Deployment.objects.count(),
        Pool.objects.count(),
        AlertRule.objects.count(),
    )
    start = time.perf_counter()
    with pytest.raises(CommandError) as refused:
        call_command("fleet_load", str(_write(tmp_path, content)))
    assert time.perf_counter() - start < 2.0
    message = str(refused.value)
    assert "1 problem(s), nothing was loaded" in message
    assert "fleet.yaml: line " in message and said in message
    assert len(message) < 500, "the message quotes the document"
    after = (
        Deployment.objects.count(),
        Pool.objects.count(),
        AlertRule.objects.count(),
    )
    assert after == before


@pytest.mark.parametrize(
    "name", ["alias bomb", "binary", "utf-16", "10,000 levels of ["]
)
def test_from_the_command_line_it_is_a_message_and_exit_1_not_a_traceback(
    tmp_path: Path, name: str
) -> None:
    content, said = HOSTILE[name]
    done = subprocess.run(
        [sys.executable, "manage.py", "fleet_load", str(_write(tmp_path, content))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        # The file is refused before any query: an empty SQLite file will do.
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{tmp_path}/db"},
        timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("CommandError: ")
    assert said in done.stderr


def test_a_value_its_column_cannot_hold_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    chat = data["deployments"][0]
    chat["gpu_count"] = 10**20
    chat["slo"] = {"ttft_p95_ms": 10**12, "itl_p95_ms": 60}
    data["deployments"][1]["account_id"] = "1" * 40
    data["pools"][0]["gpus_per_node"] = 70_000
    path = _write(tmp_path, yaml.safe_dump(data, sort_keys=False).encode())
    with pytest.raises(FileProblems) as refused:
        fleet_load(path=path)
    message = str(refused.value)
    # Bounded by the fleet file's own rules, the same on SQLite (no range on
    # an integer column) as on PostgreSQL.
    assert "pools[0] (p5-chat): gpus_per_node must be at most 1,024" in message
    assert "deployments[0] (chat): gpu_count must be at most 4,096" in message
    assert "slo.ttft_p95_ms must be at most 3,600,000" in message
    assert "deployments[1] (summarize): account_id '1111" in message
    assert "at most 32 characters" in message
    assert not Deployment.objects.exists()


def test_a_file_of_many_mistakes_lists_the_first_hundred(tmp_path: Path) -> None:
    entries = "".join(f"  - not a mapping {i}\n" for i in range(SHOWN_PROBLEMS + 50))
    path = _write(tmp_path, f"deployments:\n{entries}".encode())
    with pytest.raises(FileProblems) as refused:
        fleet_load(path=path)
    assert len(refused.value.problems) == SHOWN_PROBLEMS + 50
    assert str(refused.value).endswith("... and 50 more")
    assert str(refused.value).count("must be a mapping") == SHOWN_PROBLEMS
