"""The page benchmark still runs end to end (2 deployments, 20 days): seeding,
gunicorn under concurrent logged-in clients, the export against COPY. The real
run (50 deployments x a year) is not CI's job: docs/benchmarks.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import scratch_database

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.long]


def test_the_page_benchmark_reports_ratios_and_export_memory(redis_url: str) -> None:
    with scratch_database("costapp_bench_pages") as url:
        done = subprocess.run(
            # The cached run flushes its Redis database: this worker's own.
            [
                sys.executable,
                "bench/bench_pages.py",
                "--smoke",
                "--cache-url",
                redis_url,
            ],
            cwd=ROOT,
            env=dict(os.environ, DATABASE_URL=url, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for page in ("trivial", "overview", "deployment page", "telemetry, 90 days"):
        assert page in out, out
    assert "ratio to trivial" in out and "COPY TO" in out and "peak RSS" in out, out
    assert "page cache on" in out and "first request after a write" in out, out
    assert "python floor" in out, out
