"""The pipeline benchmark still runs end to end (10 deployments, 3 days): the
seed, promtool blocks in a real Prometheus, the refresh and every live step
timed against the raw reads. The real run (1,000 deployments) is not CI's
job: docs/benchmarks.md."""

from __future__ import annotations

import pytest

from tests.support.bench import bench_smoke
from tests.support.services import require_binary

pytestmark = pytest.mark.integration


def test_the_pipeline_benchmark_times_every_live_step_against_the_raw_reads() -> None:
    require_binary("promtool")
    require_binary("prometheus")
    out = bench_smoke("bench_pipeline.py", database="costapp_bench_pipeline")
    for stage in ("refresh", "cost_shares", "unit_costs", "alerts", "total"):
        assert stage in out, out
    assert "floor: the raw reads alone" in out and "total / floor" in out, out
