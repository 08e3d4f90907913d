"""The page benchmark still runs end to end (2 deployments, 20 days): seeding,
gunicorn under concurrent logged-in clients, the export against COPY. The real
run (50 deployments x a year) is not CI's job: docs/benchmarks.md."""

from __future__ import annotations

import re

import pytest

from tests.support.bench import bench_smoke

pytestmark = [pytest.mark.integration, pytest.mark.long]


def test_the_page_benchmark_reports_ratios_and_export_memory(redis_url: str) -> None:
    # The cached run flushes its Redis database: this worker's own.
    out = bench_smoke(
        "bench_pages.py", "--cache-url", redis_url, database="costapp_bench_pages"
    )
    for page in ("trivial", "overview", "deployment page", "telemetry, 90 days"):
        assert page in out, out
    assert "ratio to trivial" in out and "COPY TO" in out and "peak RSS" in out, out
    assert "page cache on" in out and "first request after a write" in out, out
    assert "write, then the pages step" in out and "the pages step (replaying" in out
    # The step found what the client read (a run that replays nothing
    # measures the bare miss twice).
    replayed = re.search(r"(\d+) bodies replayed", out)
    assert replayed and int(replayed.group(1)) >= 1, out
    assert "python floor" in out, out
