"""What follows a telemetry refresh, at fleet scale: 3 hours x 1,000
deployments refreshed from a real Prometheus, then the live steps (cost shares,
unit costs and baselines, idle, month forecasts, alert evaluation), as one
live worker runs them one after the other. Goal: at most 60 s on this machine.

Seeds a scratch PostgreSQL database (``DATABASE_URL``, migrated here; its
costapp tables are emptied first, so never point it at real data) with a fleet
file of ``--deployments`` single-GPU vLLM deployments and three alert rules
(hourly $ per 1k requests against its baseline for every deployment, a daily
one, telemetry staleness), ``--days`` of deployment-hours (COPY) up to three
hours ago, a daily bill line per deployment (the real ingest path), and the
full pipeline over them (the checkpoints an incremental recompute resumes
from). Prometheus holds the last nine hours of every deployment's scrapes
(one pod, a sample a minute: promtool blocks).

Per repetition, timed: the refresh's run (``telemetry_refresh_create`` and
``run_execute``: discovery, reads, records, upserts), then each live step
through ``step_execute``, as ``pipeline_step_task`` runs it. The telemetry
rollups go to the ingest worker, apart: timed and reported beside it.

Floor, in the same run: the same three hours of raw samples read with plain
``requests`` (one raw range query per deployment at costapp's concurrency,
bodies JSON-decoded): what any refresh at least costs. Reported: medians of
``--repeat`` runs, each stage's time, the total and its ratio to the floor.
Not run by CI (``--smoke`` is, tests/foundation/test_bench_pipeline_smoke.py).

    DATABASE_URL=postgres://costapp:costapp@127.0.0.1:5432/costapp_bench \\
        .venv/bin/python bench/bench_pipeline.py [--deployments 1000] [--days 14] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")
os.environ.setdefault("PROMETHEUS_URL", "http://placeholder.invalid")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from costapp.ingest import batch_write  # noqa: E402
from costapp.models import Deployment  # noqa: E402
from costapp.pipeline.change import Change  # noqa: E402
from costapp.pipeline.runner import pipeline_drain, step_execute  # noqa: E402
from costapp.pipeline.runs import run_execute  # noqa: E402
from costapp.pipeline.services import pipeline_request  # noqa: E402
from costapp.pipeline.steps import ENTRY_STEPS  # noqa: E402
from costapp.sources.base import Batch, CostRecord, ReplaceScope  # noqa: E402
from costapp.telemetry.services import telemetry_refresh_create  # noqa: E402
from tests.support.live_fleet import Fleet, Plan  # noqa: E402
from tests.support.prometheus import prometheus_server  # noqa: E402

ACCOUNT = "000000000000"
TAG_KEY = "costapp:workload"
LIVE_STEPS = ("cost_shares", "unit_costs", "idle", "forecasts", "alerts")
TABLES = (  # emptied before seeding, children first
    "costapp_telemetryrollupday", "costapp_telemetryrollup", "costapp_histogramrollup",
    "costapp_costshare", "costapp_costusageday", "costapp_costshareday",
    "costapp_costexportrow", "costapp_costexportday", "costapp_idlefigure",
    "costapp_baselinecheckpoint", "costapp_monthforecastfigure",
    "costapp_unitcostfigure", "costapp_histogramhour", "costapp_devicehour",
    "costapp_deploymenthour", "costapp_costline", "costapp_enginediscovery",
    "costapp_alertevent", "costapp_alertstate", "costapp_alertruleevaluated",
    "costapp_delivery", "costapp_ingestrun", "costapp_pipelinestep",
    "costapp_deployment", "costapp_pool",
)  # fmt: skip


def name(i: int) -> str:
    return f"bench-{i:04d}"


def fleet_yaml(n: int) -> str:
    lines = ["deployments:"]
    for i in range(n):
        lines += [
            f"  - name: {name(i)}",
            f"    team: team-{i % 20}",
            "    engine: vllm",
            "    model: meta-llama/Llama-3.1-8B-Instruct",
            "    gpu_type: L40S",
            "    gpu_count: 1",
            "    tensor_parallel_size: 1",
            "    instance_type: g6e.xlarge",
            "    region: us-east-1",
            f'    account_id: "{ACCOUNT}"',
            f'    prometheus_selector: \'job="vllm",deployment="{name(i)}"\'',
            "    cost_rules:",
            f'      - tag: {{key: "{TAG_KEY}", value: {name(i)}}}',
        ]
    lines += [
        "alerts:",
        "  rules:",
        "    - {name: hourly drift, metric: cost_per_1k_requests, grain: hour,"
        " scope: deployment, condition: ratio, ratio: 1.2, for: 1, min_requests: 100}",
        "    - {name: daily drift, metric: cost_per_1k_requests, grain: day,"
        " scope: deployment, condition: ratio, ratio: 1.2, for: 1}",
        "    - {name: stale, metric: staleness, grain: hour, scope: deployment,"
        " condition: threshold, threshold: 1}",
    ]
    return "\n".join(lines) + "\n"


def requests_per_s(i: int) -> float:
    return 1.0 + (i % 17) / 4


def seed(*, n: int, days: int, until: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(fleet_yaml(n))
    # The rules come with the fleet: what the seeded history shows is history.
    call_command("fleet_load", f.name, verbosity=0, stdout=io.StringIO())
    ids = dict(Deployment.objects.values_list("name", "id"))
    start = until - timedelta(days=days)
    stamps = [start + timedelta(hours=h) for h in range(days * 24)]
    hours = np.array([s.hour for s in stamps])
    rng = np.random.default_rng(7)
    columns = ("deployment_id, hour, requests_stop, requests_length, requests_aborted, "
               "prompt_tokens, generation_tokens, replicas_mean, replicas_max, "
               "gpu_seconds, counts_exact, samples, last_sample_at")  # fmt: skip
    # A COPY per 50 deployments: the rollup trigger takes an advisory lock per
    # deployment-day written, and a transaction holds a bounded number.
    for first in range(0, n, 50):
        rows = io.StringIO()
        for i in range(first, min(n, first + 50)):
            diurnal = 1 + 0.3 * np.sin(2 * math.pi * (hours - 8) / 24)
            served = np.round(
                3600 * requests_per_s(i) * diurnal * rng.uniform(0.97, 1.03, hours.size)
            )
            for h, at in enumerate(stamps):
                r = served[h]
                last = at + timedelta(minutes=59)
                rows.write(
                    f"{ids[name(i)]}\t{at.isoformat()}\t{r}\t0\t0\t{r * 400}\t"
                    f"{r * 100}\t1\t1\t3600\tt\t60\t{last.isoformat()}\n"
                )
        rows.seek(0)
        with connection.cursor() as cursor:
            copy_sql = f"COPY costapp_deploymenthour ({columns}) FROM STDIN"
            with cursor.cursor.copy(copy_sql) as copy:
                while chunk := rows.read(1 << 20):
                    copy.write(chunk)
    bills(n, start.date(), until.date())


def bills(n: int, first: date, end: date) -> None:
    """One daily EC2 line per deployment, a month per batch (as Cost Explorer)."""
    by_month: dict[tuple[int, int], list[CostRecord]] = {}
    day = first
    while day < end:
        at = datetime.combine(day, datetime.min.time(), UTC)
        for i in range(n):
            amount = Decimal("44.712") + Decimal(i % 7) / 10
            by_month.setdefault((at.year, at.month), []).append(
                CostRecord(
                    account_id=ACCOUNT, period_start=at,
                    service="Amazon Elastic Compute Cloud - Compute",
                    usage_type="USE1-BoxUsage:g6e.xlarge", tag_key=TAG_KEY,
                    tag_value=name(i), region="us-east-1", unblended_cost=amount,
                    amortized_cost=amount, net_amortized_cost=amount,
                    usage_quantity=Decimal(24), usage_unit="Hrs",
                )
            )  # fmt: skip
        day += timedelta(days=1)
    for (y, m), month in sorted(by_month.items()):
        start = datetime(y, m, 1, tzinfo=UTC)
        stop = (start + timedelta(days=32)).replace(day=1)
        batch_write(
            batch=Batch(month, ReplaceScope("cost_explorer", ACCOUNT, start, stop)),
            source="cost_explorer",
        )


def floor_time(url: str, n: int, end: float) -> float:
    """The same three hours of raw samples, one range selector per deployment,
    at costapp's concurrency, JSON-decoded."""
    session = requests.Session()

    def read(i: int) -> int:
        query = f'{{job="vllm",deployment="{name(i)}"}}[3h]'
        body = session.get(
            f"{url}/api/v1/query", params={"query": query, "time": end}, timeout=60
        ).json()
        return sum(len(s["values"]) for s in body["data"]["result"])

    started = time.perf_counter()
    with ThreadPoolExecutor(settings.PROMETHEUS_CONCURRENCY) as pool:
        samples = sum(pool.map(read, range(n)))
    assert samples > 0
    return time.perf_counter() - started


def refresh_once() -> dict[str, float]:
    times: dict[str, float] = {}
    started = time.perf_counter()
    runs = telemetry_refresh_create()
    assert runs
    for run in runs:  # one live worker: the parts one after the other
        run, requested = run_execute(run)
        assert run.status == "succeeded", (run.status, run.error)
        assert set(requested) == {"rollups", "cost_shares"}, requested
    times["refresh (read, records, upserts)"] = time.perf_counter() - started
    for step in LIVE_STEPS:
        t = time.perf_counter()
        result = step_execute(step)
        assert result.ran, step
        times[step] = time.perf_counter() - t
    times["total (the live path)"] = time.perf_counter() - started
    t = time.perf_counter()
    assert step_execute("rollups").ran
    times["rollups (ingest worker, apart)"] = time.perf_counter() - t
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--reuse", action="store_true",
        help="keep the database a previous run seeded (same sizes): time only",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        args.deployments, args.days, args.repeat = 10, 3, 1
    call_command("migrate", verbosity=0)
    logging.disable(logging.INFO)  # the steps log every run
    now = datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    # The refresh rewrites the last three hours (this one and the two before).
    seeded_until = hour - timedelta(hours=2)
    seeded = full = 0.0
    if not args.reuse:
        t = time.perf_counter()
        seed(n=args.deployments, days=args.days, until=seeded_until)
        seeded = time.perf_counter() - t
        t = time.perf_counter()
        pipeline_drain(pipeline_request(steps=ENTRY_STEPS["both"], change=Change()))
        full = time.perf_counter() - t
    fleet = Fleet(
        [Plan(name(i), requests_per_s(i), pods=1) for i in range(args.deployments)]
    )
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        samples = fleet.history(
            root / "recent.om", start=(hour - timedelta(hours=9)).timestamp(),
            end=now.timestamp(), step=60,
        )  # fmt: skip
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet",
             "--max-block-duration=24h", str(root / "recent.om"), str(root / "tsdb")],
            check=True, capture_output=True,
        )  # fmt: skip
        blocks = time.perf_counter() - t
        with prometheus_server(
            root,
            "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
            "--storage.tsdb.retention.time=10y",
        ) as prometheus:
            settings.PROMETHEUS_URL = prometheus.url
            runs, floors = [], []
            for _ in range(args.repeat):
                floors.append(
                    floor_time(prometheus.url, args.deployments, now.timestamp())
                )
                runs.append(refresh_once())
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    floor = statistics.median(floors)
    print(
        f"{args.deployments} deployments, {args.days} days of hours stored, "
        f"{samples:,} samples in Prometheus; seeded in {seeded:.0f} s, full "
        f"pipeline {full:.0f} s, blocks {blocks:.0f} s"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; medians of {args.repeat} run(s)"
    )
    for key, value in median.items():
        print(f"  {key:34s} {value:7.2f} s  (runs: "
              + ", ".join(f"{r[key]:.2f}" for r in runs) + ")")  # fmt: skip
    print(f"  {'floor: the raw reads alone':34s} {floor:7.2f} s")
    print(f"  total / floor: {median['total (the live path)'] / floor:.1f}x")


if __name__ == "__main__":
    main()
