"""Management commands refuse a bad day as every page does (field and value),
as a usage error, never a traceback from inside argparse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "args", "said"),
    [
        (
            "bills_backfill",
            ["--account", "1", "--start", "2026-13-01", "--end", "2026-12-01"],
            "argument --start: start='2026-13-01': is not a date (YYYY-MM-DD)",
        ),
        (
            "telemetry_rollup",
            ["--start", "0001-01-01"],
            "argument --start: start='0001-01-01': is outside the supported range",
        ),
    ],
)
def test_a_bad_day_is_a_usage_error_naming_field_and_value(
    command: str, args: list[str], said: str
) -> None:
    with pytest.raises(
        CommandError, match=said.replace("(", r"\(").replace(")", r"\)")
    ):
        call_command(command, *args)


@pytest.mark.smoke
def test_from_the_command_line_it_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "telemetry_rollup", "--start", "2026-13-01"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        },
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(
        "error: argument --start: start='2026-13-01': is not a date (YYYY-MM-DD)"
    )
