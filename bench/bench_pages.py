"""Page and export speed on a year of hourly data for 50 deployments.

Seeds a scratch PostgreSQL database (``DATABASE_URL``, migrated here; its
costapp tables are emptied first, so never point it at real data) with:

- a fleet file of ``--deployments`` single-GPU deployments (tag rules, SLOs);
- one year of deployment-hours, device-hours and three latency histograms per
  hour (ttft, itl, e2e, vLLM's bucket bounds), written with COPY;
- one daily bill line per deployment, through the real ingest path;
- the stored unit-cost figures (``unit_costs_recompute``, the full pass);
- the telemetry pages' two-hour rollups (``telemetry_rollup``: the ingest
  stores them for what it writes, COPY does not).

Then it starts gunicorn with the compose command's config on a loopback port,
logs in, and drives ``--clients`` concurrent clients through the overview, a
deployment page, a 90-day telemetry page and a trivial authenticated page
(``/home/``: the session, the middleware stack and the landing redirect, no
data). Reported: median and p95 client-side time per page on loopback (the
server's time plus a loopback round trip) and each page's median as a ratio to
the trivial page's median measured in the same run (goal: within 3x). Then
the first request after a write, one client: after the write alone, and after
the write and the pipeline's last step (``pages``: the worker renders again
what was read, costapp/pagewarm.py), as a refresh runs them (goal: within 3x).

Last, the year's finance export as CSV through ``manage.py costs_export``
against PostgreSQL's own ``COPY (SELECT ...) TO STDOUT`` of the bill lines it
reads, as a ratio of times (goal: export >= 0.3 x COPY), with the export
process's peak RSS for one month and for the year (memory flat: < 20 MB apart),
and a second floor in the same run: the least a row-by-row Python export of the
stored shares and usage does (``python_floor_time``). The seed's store writes
the export rows by deployment too (``CostExportRow``), so the export reads them;
the report says for how many days.

Not run by CI (a smoke run is: tests/analytics/test_bench_smoke.py).

    DATABASE_URL=postgres://costapp:costapp@127.0.0.1:5432/costapp_bench \\
        .venv/bin/python bench/bench_pages.py [--smoke] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

import django  # noqa: E402

django.setup()

import requests  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402
from scipy.special import ndtr  # noqa: E402

from costapp.ingest import batch_write  # noqa: E402
from costapp.models import Deployment  # noqa: E402
from costapp.sources.base import Batch, CostRecord, ReplaceScope  # noqa: E402
from costapp.sources.demo.telemetry import (  # noqa: E402
    E2E_BOUNDS,
    ITL_BOUNDS,
    LATENCY_SIGMA,
    TTFT_BOUNDS,
)

ACCOUNT = "000000000000"
TAG_KEY = "costapp:workload"
PASSWORD = "bench-pages-password-1"  # a scratch user in a scratch database
TABLES = (  # emptied before seeding, children first
    "costapp_telemetryrollupday",
    "costapp_telemetryrollup",
    "costapp_histogramrollup",
    "costapp_costshare",
    "costapp_costusageday",
    "costapp_costshareday",
    "costapp_idlefigure",
    "costapp_baselinecheckpoint",
    "costapp_unitcostfigure",
    "costapp_histogramhour",
    "costapp_devicehour",
    "costapp_deploymenthour",
    "costapp_costline",
)


# --- seeding ------------------------------------------------------------------


def fleet_yaml(n: int) -> str:
    lines = ["deployments:"]
    for i in range(n):
        lines += [
            f"  - name: bench-{i:02d}",
            f"    team: team-{i % 5}",
            "    engine: vllm",
            '    engine_version: "0.10.1"',
            "    model: meta-llama/Llama-3.1-8B-Instruct",
            "    gpu_type: L40S",
            "    gpu_count: 1",
            "    tensor_parallel_size: 1",
            "    instance_type: g6e.xlarge",
            "    region: us-east-1",
            f'    account_id: "{ACCOUNT}"',
            f"    prometheus_selector: 'app=\"bench-{i:02d}\"'",
            "    cost_rules:",
            f'      - tag: {{key: "{TAG_KEY}", value: bench-{i:02d}}}',
            "    slo: {ttft_p95_ms: 2500, itl_p95_ms: 80}",
        ]
    return "\n".join(lines) + "\n"


def _copy(table: str, columns: list[str], rows: io.StringIO) -> None:
    rows.seek(0)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(
            f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        ) as copy:
            while chunk := rows.read(1 << 20):
                copy.write(chunk)


def _buckets(
    bounds: tuple[float, ...], counts: np.ndarray, medians: np.ndarray
) -> list[str]:
    """Cumulative bucket counts (JSON text) of lognormal observations."""
    z = (np.log(np.asarray(bounds))[None, :] - np.log(medians)[:, None]) / LATENCY_SIGMA
    cumulative = np.round(counts[:, None] * ndtr(z))
    return [
        json.dumps([*map(float, row), float(total)])
        for row, total in zip(cumulative, np.round(counts), strict=True)
    ]


def seed(*, deployments: int, days: int, end: date) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(fleet_yaml(deployments))
    call_command("fleet_load", f.name, verbosity=0)
    names = [f"bench-{i:02d}" for i in range(deployments)]
    ids = dict(Deployment.objects.filter(name__in=names).values_list("name", "id"))
    start = datetime.combine(end - timedelta(days=days), datetime.min.time(), UTC)
    hours = np.arange(days * 24)
    stamps = [start + timedelta(hours=int(h)) for h in hours]
    rng = np.random.default_rng(7)
    bounds = {
        "ttft": json.dumps([*TTFT_BOUNDS, None]),
        "itl": json.dumps([*ITL_BOUNDS, None]),
        "e2e": json.dumps([*E2E_BOUNDS, None]),
    }
    for i, name in enumerate(names):  # one COPY each, so memory stays flat
        dep_id = ids[name]
        dh, dev, hist = io.StringIO(), io.StringIO(), io.StringIO()
        diurnal = 1 + 0.5 * np.sin(2 * math.pi * ((hours % 24) - 8) / 24)
        requests_ = np.round(
            (2000 + 40 * i) * diurnal * rng.uniform(0.9, 1.1, hours.size)
        )
        prompt, gen = requests_ * 900, requests_ * 180
        running = requests_ / 200
        kv = np.clip(running / 40, 0, 1)
        ttft = 0.3 * (1 + kv)
        itl = 0.025 * (1 + 0.5 * kv)
        for h, at in enumerate(stamps):
            r = requests_[h]
            dh.write(
                f"{dep_id}\t{at.isoformat()}\t{r}\t0\t0\t{prompt[h]}\t{gen[h]}\t1\t1\t3600\t"
                f"{kv[h]}\t{min(1.0, kv[h] * 1.3)}\t{running[h]}\t{running[h] * 1.5}\t0\t1\t"
                f"0\t{r * 5}\t{r * 2}\tt\t60\n"
            )
            dev.write(
                f"{dep_id}\thost-{i:02d}\tGPU-{i:08d}\t0\tNVIDIA L40S\t\t\t{at.isoformat()}\t"
                f"{kv[h] * 90}\t{kv[h] * 0.8}\t{kv[h] * 0.5}\t40000\t6000\t250\t900000\t60\n"
            )
        n_tok = gen
        for metric, b, count, median in (
            ("ttft", TTFT_BOUNDS, requests_, ttft),
            ("itl", ITL_BOUNDS, n_tok, itl),
            ("e2e", E2E_BOUNDS, requests_, ttft + 180 * itl),
        ):
            mean = median * math.exp(LATENCY_SIGMA**2 / 2)
            for h, counts in enumerate(_buckets(b, count, median)):
                total = round(float(count[h]))
                hist.write(
                    f"{dep_id}\t{stamps[h].isoformat()}\t{metric}\t{bounds[metric]}\t"
                    f"{counts}\t{total * mean[h]}\t{total}\n"
                )
        _copy(
            "costapp_deploymenthour",
            ["deployment_id", "hour", "requests_stop", "requests_length", "requests_aborted",
             "prompt_tokens", "generation_tokens", "replicas_mean", "replicas_max",
             "gpu_seconds", "kv_cache_usage_mean", "kv_cache_usage_max", "running_mean",
             "running_max", "waiting_mean", "waiting_max", "preemptions",
             "prefix_cache_queries", "prefix_cache_hits", "counts_exact", "samples"],
            dh,
        )  # fmt: skip
        _copy(
            "costapp_devicehour",
            ["deployment_id", "hostname", "gpu_uuid", "gpu_index", "gpu_model",
             "mig_profile", "gpu_instance_id", "hour", "gpu_util_mean",
             "gr_engine_active_mean", "dram_active_mean", "fb_used_mib_mean",
             "fb_free_mib_mean", "power_w_mean", "energy_j", "samples"],
            dev,
        )  # fmt: skip
        _copy(
            "costapp_histogramhour",
            ["deployment_id", "hour", "metric", "bounds", "cumulative_counts",
             "total_sum", "total_count"],
            hist,
        )  # fmt: skip
    bills(names, start.date(), days)
    call_command("unit_costs_recompute", verbosity=0)
    # COPY bypasses the ingest, which stores the telemetry rollups of the
    # days it writes: store them as a live database has them.
    call_command("telemetry_rollup", verbosity=0)
    return names


def bills(names: list[str], first: date, days: int) -> None:
    """One daily EC2 line per deployment, a month per batch (as Cost Explorer)."""
    by_month: dict[tuple[int, int], list[CostRecord]] = {}
    for d in range(days):
        day = datetime.combine(first + timedelta(days=d), datetime.min.time(), UTC)
        for i, name in enumerate(names):
            amount = Decimal("44.712") + Decimal(i % 7) / 10
            by_month.setdefault((day.year, day.month), []).append(
                CostRecord(
                    account_id=ACCOUNT,
                    period_start=day,
                    service="Amazon Elastic Compute Cloud - Compute",
                    usage_type="USE1-BoxUsage:g6e.xlarge",
                    tag_key=TAG_KEY,
                    tag_value=name,
                    region="us-east-1",
                    unblended_cost=amount,
                    amortized_cost=amount,
                    net_amortized_cost=amount,
                    usage_quantity=Decimal(24),
                    usage_unit="Hrs",
                )
            )
    for (y, m), month in sorted(by_month.items()):
        start = datetime(y, m, 1, tzinfo=UTC)
        end = (start + timedelta(days=32)).replace(day=1)
        batch_write(
            batch=Batch(month, ReplaceScope("cost_explorer", ACCOUNT, start, end)),
            source="cost_explorer",
        )


# --- pages under load -----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _user() -> str:
    from django.contrib.auth.models import Group, User

    user, _ = User.objects.get_or_create(username="bench-pages")
    user.set_password(PASSWORD)
    user.save()
    user.groups.set([Group.objects.get(name="admin")])
    return user.username


def _login(base: str, username: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "no CSRF token on the login page"
    done = session.post(
        f"{base}/login/",
        data={"username": username, "password": PASSWORD,
              "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": f"{base}/login/"},
        timeout=30,
    )  # fmt: skip
    assert "sessionid" in session.cookies, f"login failed ({done.status_code})"
    return session


def pages_time(
    base: str, pages: dict[str, str], *, clients: int, rounds: int, username: str
) -> dict[str, list[float]]:
    """Each client runs ``rounds`` passes over every page, in its own order."""
    times: dict[str, list[float]] = {k: [] for k in pages}
    lock = threading.Lock()
    errors: list[str] = []

    def client(k: int) -> None:
        try:
            visit(k)
        except Exception as exc:  # a thread's exception would vanish silently
            errors.append(f"client {k}: {exc!r}")

    def visit(k: int) -> None:
        session = _login(base, username)
        order = list(pages.items())
        for r in range(rounds):
            for label, path in (
                order[(k + r) % len(order) :] + order[: (k + r) % len(order)]
            ):
                t0 = time.perf_counter()
                response = session.get(base + path, allow_redirects=False, timeout=120)
                elapsed = time.perf_counter() - t0
                if response.status_code not in (200, 302):
                    errors.append(f"{path}: {response.status_code}")
                with lock:
                    times[label].append(elapsed)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    return times


def serve(
    port: int, workers: int, cache_url: str | None = None
) -> subprocess.Popen[bytes]:
    """gunicorn with the compose config; ``cache_url`` (Redis) shares the
    page bodies between the workers as compose does, None turns the page
    cache off so that every request renders."""
    env = dict(os.environ, GUNICORN_BIND=f"127.0.0.1:{port}",
               GUNICORN_WORKERS=str(workers), GUNICORN_TIMEOUT="300",
               PAGE_CACHE_SECONDS="300" if cache_url else "0",
               PAGE_CACHE_URL=cache_url or "")  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "costapp/gunicorn_conf.py",
         "--access-logfile", "/dev/null", "costapp.wsgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).ok:
                return proc
        except requests.RequestException:  # not listening yet, or still loading
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("gunicorn did not answer /healthz within 120 s")


Times = dict[str, list[float]]
TRIVIAL = "trivial (/home/ redirect)"
MISS_RUNS = 7


def pages_measure(
    pages: dict[str, str],
    username: str,
    args: argparse.Namespace,
    *,
    cache_url: str | None,
) -> tuple[Times, Times, Times]:
    """(medians, p95s, ratios to the trivial page) per page, one entry per
    repeat, against a fresh gunicorn with the page cache off or on."""
    if cache_url:
        redis.Redis.from_url(cache_url).flushdb()
    port = _free_port()
    proc = serve(port, workers=args.clients, cache_url=cache_url)
    medians: Times = {k: [] for k in pages}
    p95s: Times = {k: [] for k in pages}
    ratios: Times = {k: [] for k in pages}
    try:
        base = f"http://127.0.0.1:{port}"
        pages_time(base, pages, clients=1, rounds=1, username=username)  # warm
        for _ in range(args.repeat):
            times = pages_time(
                base, pages, clients=args.clients, rounds=args.rounds, username=username
            )
            floor = statistics.median(times[TRIVIAL])
            for label, ts in times.items():
                medians[label].append(statistics.median(ts))
                p95s[label].append(float(np.percentile(ts, 95)))
                ratios[label].append(statistics.median(ts) / floor)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return medians, p95s, ratios


@dataclass(frozen=True)
class Misses:
    """The first request after a write, (median, ratio to the trivial page)
    per page: ``bare`` after a write alone (what a reader meets while the
    worker has not rendered yet), ``refreshed`` after the write and the
    pipeline's last step as the live worker runs it (``pages_warm``), the
    order a refresh runs in; ``warm_s``: that step's seconds, the window in
    which a reader still meets the bare figure."""

    bare: dict[str, tuple[float, float]]
    refreshed: dict[str, tuple[float, float]]
    warm_s: list[float]
    replayed: list[int]  # bodies each run of the step rendered or found


def misses_measure(pages: dict[str, str], username: str, *, cache_url: str) -> Misses:
    """With the cache on, what a request costs right after a write (a fleet
    holiday inserted and deleted, as a fleet-file load would), without and
    with the worker's rendering of what was read (costapp/pagewarm.py)."""
    from django.test import override_settings

    from costapp.models import TeamHoliday
    from costapp.pipeline.work import pages as pages_step

    def write() -> None:
        TeamHoliday.objects.create(team="bench-miss", name="write")
        TeamHoliday.objects.filter(team="bench-miss").delete()

    port = _free_port()
    proc = serve(port, workers=1, cache_url=cache_url)
    shared = {**settings.PAGE_CACHE_REDIS, "LOCATION": cache_url, "TIMEOUT": 300}
    bare: Times = {k: [] for k in pages}
    refreshed: Times = {k: [] for k in pages}
    warm_s: list[float] = []
    replayed: list[int] = []
    try:
        base = f"http://127.0.0.1:{port}"
        session = _login(base, username)
        with override_settings(
            CACHES={**settings.CACHES, "pages": shared}, PAGE_CACHE_SECONDS=300
        ):
            for _ in range(MISS_RUNS):
                for label, path in pages.items():
                    for times, worker in ((bare, False), (refreshed, True)):
                        session.get(base + path, allow_redirects=False, timeout=120)
                        write()
                        if worker:
                            t0 = time.perf_counter()
                            done = pages_step(None, timezone.now())  # type: ignore[arg-type]
                            warm_s.append(time.perf_counter() - t0)
                            replayed.append(done.rows)
                        t0 = time.perf_counter()
                        session.get(base + path, allow_redirects=False, timeout=120)
                        times[label].append(time.perf_counter() - t0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    def ratios(times: Times) -> dict[str, tuple[float, float]]:
        floor = statistics.median(times[TRIVIAL])
        return {
            k: (statistics.median(ts), statistics.median(ts) / floor)
            for k, ts in times.items()
        }

    return Misses(ratios(bare), ratios(refreshed), warm_s, replayed)


# --- export against COPY ----------------------------------------------------------


EXPORT_PROCESS = """
import os, resource, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")
django.setup()
from django.core.management import call_command, load_command_class
from django.db import connection
t0 = time.perf_counter()
# The command's imports (pyarrow, pandas through costapp.validation) are
# loaded once per process; a web worker or a job runner has them already.
command = load_command_class("costapp", "costs_export")
# The database connection is open before the clock starts, as COPY's is
# (the bench's own connection): the export is timed, not the log-in.
connection.ensure_connection()
t1 = time.perf_counter()
call_command(command, *sys.argv[1:])
t2 = time.perf_counter()
print("EXPORT", t2 - t1, t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@dataclass(frozen=True)
class ExportRun:
    seconds: float  # the export itself, its module imports loaded
    imports: float  # importing the command's modules (once per process)
    peak_mb: float


def export_peak(start: date, end: date, out: Path) -> ExportRun:
    """One ``costs_export`` process: its own process, so the peak RSS is the
    export's alone."""
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_PROCESS,
         "--start", start.isoformat(), "--end", end.isoformat(), "--out", str(out)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    seconds, imports, peak_kb = done.stdout.rsplit("EXPORT", 1)[1].split()[:3]
    return ExportRun(float(seconds), float(imports), int(peak_kb) / 1024)


def copy_time(start: date, end: date) -> tuple[float, int]:
    """PostgreSQL's COPY TO of the bill lines the export reads."""
    sink = io.BytesIO()
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.cursor.copy(
            "COPY (SELECT * FROM costapp_costline WHERE period_start >= %s "
            "AND period_start < %s ORDER BY period_start) TO STDOUT (FORMAT csv)",
            (start, end),
        ) as copy:
            for chunk in copy:
                sink.write(chunk)
    return time.perf_counter() - t0, sink.getvalue().count(b"\n")


_FLOOR_SHARES = (
    "SELECT day, account_id, currency, target, pool, how, amount "
    "FROM costapp_costshare WHERE basis = 'amortized' AND day >= %s AND day < %s "
    "ORDER BY day, account_id, currency, id"
)
_FLOOR_USAGE = (
    "SELECT day, deployment, gpu_hours, requests, nominal_hours, prompt_tokens, "
    "generation_tokens FROM costapp_costusageday WHERE day >= %s AND day < %s"
)
_Q = Decimal("1e-12")


def python_floor_time(start: date, end: date) -> tuple[float, int]:
    """A second floor: the least a row-by-row Python export of the same stored
    rows does, and nothing else (no rules, no summary, no formula-safe text):
    read the shares and the usage, pair each share with its deployment's day,
    three unit costs, one f-string a row. What the export's own rules cost is
    the distance between it and the export."""
    sink = io.StringIO()
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        raw = cursor.cursor
        raw.execute(_FLOOR_USAGE, (start, end))
        usage = {(r[0], r[1]): r for r in raw.fetchall()}
        raw.execute(_FLOOR_SHARES, (start, end))
        for day, account, currency, target, pool, how, amount in raw:
            use = usage.get((day, target))
            if use is None:
                continue
            hours, n, nominal = float(use[2]), float(use[3]), use[4]
            prompt, generation = use[5], use[6]
            tokens = prompt + generation
            per_1k = (amount * 1000 / Decimal(repr(n))).quantize(_Q) if n else None
            per_1m = (
                (amount * 1_000_000 / Decimal(repr(tokens))).quantize(_Q)
                if tokens
                else None
            )
            per_h = (amount / Decimal(repr(hours))).quantize(_Q) if hours else None
            sink.write(
                f"{day.isoformat()},1,{account},{currency},amortized,{target},{pool},"
                f"{how},final,1,0,0,{amount},,{n!r},{prompt!r},{generation!r},"
                f"{hours!r},{nominal},{per_1k},{per_1m},{per_h}\r\n"
            )
    return time.perf_counter() - t0, sink.getvalue().count("\n")


@dataclass(frozen=True)
class ExportFigures:
    rows: int
    lines: int
    runs: list[ExportRun]
    copy_s: list[float]
    floor_s: list[float]
    peak_month: list[float]
    stored_days: int
    days: int
    export_rows_days: int

    def report(self) -> None:
        med = statistics.median
        export_s = med([r.seconds for r in self.runs])
        imports = med([r.imports for r in self.runs])
        copy_s = med(self.copy_s)
        peak_year = med([r.peak_mb for r in self.runs])
        print(f"stored allocation: {self.stored_days} of {self.days} days; "
              f"export rows stored (read whole): {self.export_rows_days} days")  # fmt: skip
        print(f"export of the year as CSV: {export_s:.3f} s ({self.rows} rows; "
              f"+{imports:.2f} s importing its modules once per process); COPY TO "
              f"of its {self.lines} bill lines: {copy_s:.3f} s; ratio "
              f"{copy_s / export_s:.3f} (with the imports "
              f"{copy_s / (export_s + imports):.3f})")  # fmt: skip
        floor_s = med(self.floor_s)
        print(f"python floor (read, pair, three unit costs, one line a row): "
              f"{floor_s:.3f} s, {copy_s / floor_s:.3f} x COPY; the export is "
              f"{export_s / floor_s:.2f} x the floor's time")  # fmt: skip
        print(f"export peak RSS: one month {med(self.peak_month):.0f} MB, the year "
              f"{peak_year:.0f} MB (difference "
              f"{peak_year - med(self.peak_month):.0f} MB)")  # fmt: skip


def export_measure(end: date, days: int, repeat: int) -> ExportFigures:
    """The year's export against COPY, the month's and the year's peak RSS,
    interleaved run by run so both see the same machine load."""
    from costapp.costs.allocations import stored_days_read
    from costapp.costs.export.day_rows import DayRows
    from costapp.costs.export.reads import export_digest_days_read

    year_start = end - timedelta(days=days)
    month_start = end - timedelta(days=30)
    runs, copy_s, floor_s, peak_month = [], [], [], []
    rows = lines = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            runs.append(export_peak(year_start, end, Path(tmp) / "year.csv"))
            rows = sum(1 for _ in (Path(tmp) / "year.csv").open()) - 1
            peak_month.append(
                export_peak(month_start, end, Path(tmp) / "month.csv").peak_mb
            )
            c, lines = copy_time(year_start, end)
            copy_s.append(c)
            floor_s.append(python_floor_time(year_start, end)[0])
    stored = stored_days_read(year_start, end)
    whole = len(export_digest_days_read(stored, DayRows().digest()))
    return ExportFigures(
        rows, lines, runs, copy_s, floor_s, peak_month, len(stored), days, whole
    )


# --- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deployments", type=int, default=50)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2 deployments, 20 days")
    parser.add_argument(
        "--seed-only", action="store_true", help="seed the database, measure nothing"
    )
    parser.add_argument(
        "--no-seed",
        action="store_true",
        help="measure what an earlier --seed-only wrote",
    )
    parser.add_argument(
        "--cache-url",
        default="redis://127.0.0.1:6379/10",
        help="Redis database the cached run's workers share (flushed first)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.deployments, args.days, args.rounds, args.repeat = 2, 20, 2, 1
    if connection.vendor != "postgresql":
        raise SystemExit("bench_pages needs DATABASE_URL pointing at PostgreSQL")
    call_command("migrate", verbosity=0)
    end = datetime.now(UTC).date()
    t0 = time.perf_counter()
    if args.no_seed:
        names = sorted(
            Deployment.objects.filter(name__startswith="bench-").values_list(
                "name", flat=True
            )
        )
        args.deployments = len(names)
    else:
        names = seed(deployments=args.deployments, days=args.days, end=end)
    seeded = time.perf_counter() - t0
    if args.seed_only:
        print(
            f"seeded {args.deployments} deployments x {args.days} days in {seeded:.0f} s"
        )
        return
    username = _user()
    window = f"?start={(end - timedelta(days=90)).isoformat()}&end={end.isoformat()}"
    pages = {
        TRIVIAL: "/home/",
        "overview": "/",
        "deployment page": f"/fleet/{names[0]}/",
        "telemetry, 90 days": f"/telemetry/{names[0]}/{window}",
    }
    runs = {
        "no cache (every request renders)": pages_measure(
            pages, username, args, cache_url=None
        ),
        "page cache on (Redis, as in compose)": pages_measure(
            pages, username, args, cache_url=args.cache_url
        ),
    }
    misses = misses_measure(pages, username, cache_url=args.cache_url)

    export = export_measure(end, args.days, args.repeat)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:8.1f} ms"

    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")  # fmt: skip
    how = "seeded earlier (--no-seed)" if args.no_seed else f"seeded in {seeded:.0f} s"
    print(f"{args.deployments} deployments x {args.days} days hourly, {how}; "
          f"{args.clients} clients x {args.rounds} rounds, median of {args.repeat} runs")  # fmt: skip
    for mode, (medians, p95s, ratios) in runs.items():
        print(f"\n{mode}")
        print(f"{'page':28} {'median':>11} {'p95':>11} {'ratio to trivial':>17}")
        for label in pages:
            print(f"{label:28} {ms(medians[label])} {ms(p95s[label])} "
                  f"{statistics.median(ratios[label]):16.2f}x")  # fmt: skip
    print(
        "\nfirst request after a write, cache on (one client; median of "
        f"{MISS_RUNS}; ratio to the trivial page's median in the same loop)"
    )
    print(f"{'page':28} {'write alone':>28} {'write, then the pages step':>28}")
    for label in pages:
        (m1, r1), (m2, r2) = misses.bare[label], misses.refreshed[label]
        print(f"{label:28} {m1 * 1000:12.1f} ms {r1:12.2f}x "
              f"{m2 * 1000:12.1f} ms {r2:12.2f}x")  # fmt: skip
    print(f"the pages step (replaying what was read): median "
          f"{statistics.median(misses.warm_s):.2f} s, "
          f"max {max(misses.warm_s):.2f} s, "
          f"{statistics.median(misses.replayed):.0f} bodies replayed (median)")  # fmt: skip
    export.report()


if __name__ == "__main__":
    main()
