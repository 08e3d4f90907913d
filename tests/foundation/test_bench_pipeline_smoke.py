"""The pipeline benchmark still runs end to end (10 deployments, 3 days): the
seed, promtool blocks in a real Prometheus, the refresh and every live step
timed against the raw reads. The real run (1,000 deployments) is not CI's
job: docs/benchmarks.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import require_binary, scratch_database

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_the_pipeline_benchmark_times_every_live_step_against_the_raw_reads() -> None:
    require_binary("promtool")
    require_binary("prometheus")
    with scratch_database("costapp_bench_pipeline") as url:
        done = subprocess.run(
            [sys.executable, "bench/bench_pipeline.py", "--smoke"],
            cwd=ROOT,
            env=dict(os.environ, DATABASE_URL=url, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for stage in ("refresh", "cost_shares", "unit_costs", "alerts", "total"):
        assert stage in out, out
    assert "floor: the raw reads alone" in out and "total / floor" in out, out
