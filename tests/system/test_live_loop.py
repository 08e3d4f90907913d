"""The loop as docker-compose.yml runs it, over time: from a new hour in
Prometheus to a page for on-call, with nobody typing a command.

The topology is compose's, outside Docker: a scratch PostgreSQL database,
Redis as the broker, and ``worker``, ``live-worker``, ``alerts-worker`` and
``beat`` started with the exact commands of docker-compose.yml and the
environment it gives them, periods shortened through the documented
``COSTAPP_SCHEDULE_*_S`` variables. A real Prometheus holds ten days of a
vLLM fleet's scrapes and receives fresh ones by remote write as time passes;
Cost Explorer is the test emulator; the on-call webhook receiver verifies
each Standard Webhooks signature from a private address in a network
namespace (the outbound guard never connects to loopback).

To see an hour close within minutes, the product's processes run under a
shifted clock (libfaketime: ``faketime -f +N``) that puts them shortly before
an hour ``C`` ends; Prometheus keeps the real clock and is fed samples
stamped by the shifted one. The setup runs the documented commands first, in
process (no broker), a few minutes of product time earlier: fleet, ten days
of telemetry and bills backfilled, figures recomputed, then the alert rules
loaded (history stored before them is history). Then the stack starts
``LEAD_S`` before ``C`` (the clock jumps forward: the feeder pushes what was
"scraped" meanwhile at once), and a backfill is queued on it, as an admin
would from the telemetry page.

What it shows (and prints, with each delay):

- ``chat`` runs twice the pods from 20 minutes before ``C`` (mid-hour) and
  ``rag`` from the start of that hour (on its boundary), the same traffic
  both: each is paged within two refresh periods plus one evaluation period
  of ``C`` plus the settle delay, never before that hour closes, and not
  resolved by the partial hour after it;
- ``embed``'s bill for yesterday arrives by the beat's bill refresh at twice
  its usual amount: the day rule on the billed clock pages, late, and says
  how late;
- ``batch`` stops being scraped: one staleness page, none for the others;
- the backfill runs across ``C`` on the ingest worker and delays none of it;
- the live worker killed with SIGKILL while it recomputes: the figures are
  current again within the lease plus the reaper's period.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.foundation.test_compose_commands import compose_command
from tests.support.live_fleet import Feeder, Fleet, Plan, wait_until
from tests.support.netns import NamespacedReceiver, receiver_in_namespace
from tests.support.prometheus import prometheus_server
from tests.support.services import (
    ROOT,
    require_binary,
    scratch_database,
)

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.long]

ACCOUNT = "210987654321"
TAG = "costapp:workload"
SCRAPE_S = 5
SETTLE_S = 2 * SCRAPE_S  # costapp.settings.COSTAPP_SETTLE_S
REFRESH_S = 20
EVALUATE_S = 20
REAP_S = 10
LEASE_S = 10
REQUEUE_S = 15
BILLS_S = 30
# costapp.schedule.page_bound_s on this schedule: what docs/alerts.md promises.
BOUND_S = 2 * REFRESH_S + EVALUATE_S
HISTORY_DAYS = 10
HISTORY_STEP_S = 60
LEAD_S = 80  # the stack starts this long before C
# The setup's clock starts this long before C: its commands take a minute or
# two, then the clock jumps forward to the stack's start (the data read last
# in the setup is then a few minutes old, under the staleness threshold).
SETUP_BEFORE_S = LEAD_S + 4 * 60
STALE_AFTER_H = 0.1  # six minutes without a sample
# The backfill is queued this long before C. It takes ~35 s on a quiet
# 2-core machine (longer under load), so it is still running when the hour
# closes (C + SETTLE_S); queued 30 s before C it had ended 3 s too early.
BACKFILL_BEFORE_S = 15
BATCH_STOPS_S = 7 * 60  # before C: stale a minute before it
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
WORKERS = ("worker", "live-worker", "alerts-worker", "beat")


@dataclass
class Clock:
    """The product's clock: the real one shifted by ``delta`` seconds."""

    delta: int

    def now(self) -> float:
        return time.time() + self.delta

    def argv(self, argv: list[str]) -> list[str]:
        # Every clock moves by the same offset, the monotonic one too
        # (libfaketime's --exclude-monotonic breaks Python's time.sleep). The
        # offset is positive, so no clock goes below zero.
        assert self.delta > 0
        return ["faketime", "-m", "-f", f"{self.delta:+d}", *argv]


def _hour_after(t: float) -> float:
    """The next hour boundary after ``t`` that is not a midnight (a day
    closing too would only add pages this test does not look for)."""
    c = (int(t) // 3600 + 1) * 3600
    if c % 86400 == 0:
        c += 3600
    return c


def fleet_yaml(receiver: NamespacedReceiver | None) -> str:
    common = {
        "team": "assistant", "engine": "vllm", "model": "meta-llama/Llama-3.2-3B-Instruct",
        "gpu_type": "L4", "gpu_count": 1, "tensor_parallel_size": 1,
        "instance_type": "g6.xlarge", "region": "us-east-1", "account_id": ACCOUNT,
    }  # fmt: skip
    deployments = [
        {
            **common,
            "name": name,
            "prometheus_selector": f'job="vllm",deployment="{name}"',
        }
        for name in ("chat", "rag", "embed", "batch")
    ]
    deployments[2]["cost_rules"] = [{"tag": {"key": TAG, "value": "embed"}}]
    data: dict[str, Any] = {"deployments": deployments}
    if receiver is not None:
        hook = "oncall-hook"
        data["alerts"] = {
            "channels": [
                {"name": hook, "kind": "webhook", "url": receiver.url,
                 "secret_env": "ONCALL_WEBHOOK_SECRET"}
            ],
            "rules": [
                {"name": "unit cost drift, hourly", "metric": "cost_per_1k_requests",
                 "grain": "hour", "scope": "deployment", "condition": "ratio",
                 "ratio": 1.2, "for": 1, "min_requests": 100, "channels": [hook]},
                {"name": "embed billed day", "metric": "cost_per_1k_requests",
                 "grain": "day", "scope": "deployment", "scope_name": "embed",
                 "condition": "ratio", "ratio": 1.2, "for": 1, "channels": [hook]},
                {"name": "telemetry stale", "metric": "staleness", "grain": "hour",
                 "scope": "deployment", "condition": "threshold",
                 "threshold": STALE_AFTER_H, "channels": [hook]},
            ],
        }  # fmt: skip
    return yaml.safe_dump(data)


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def bills(emulator: CostExplorerEmulator, *, close: float) -> tuple[str, str]:
    """embed's daily bill: two g6.xlarge at the list price, every day of the
    history; yesterday (Estimated, as Cost Explorer marks recent days) at
    twice that. Returns (first day, yesterday)."""
    today = int(close - 3600) // 86400 * 86400
    first = today - HISTORY_DAYS * 86400
    usual = 2 * 24 * 0.8048
    for t in range(first, today, 86400):
        yesterday = t == today - 86400
        emulator.add(
            Line(
                account=ACCOUNT, start=_day(t), usage_type="USE1-BoxUsage:g6.xlarge",
                amount=f"{usual * (2 if yesterday else 1):.10f}", tags={TAG: "embed"},
                quantity="48",
            )
        )  # fmt: skip
    emulator.estimated.add(_day(today - 86400))
    return _day(first), _day(today - 86400)


@dataclass
class Stack:
    env: dict[str, str]
    clock: Clock
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def start(self, name: str) -> None:
        argv = compose_command(name)
        if name == "beat":
            argv[argv.index("--schedule") + 1] = str(self.logs / "beat-schedule")
        with (self.logs / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                self.clock.argv(argv),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its prefork children in its group
            )

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def manage(env: dict[str, str], clock: Clock, *args: str) -> str:
    result = subprocess.run(
        clock.argv([sys.executable, "manage.py", *args]),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-5000:])
    return result.stdout


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live-loop")


@pytest.fixture(scope="module")
def world(tmp: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    require_binary("faketime")
    promtool = require_binary("promtool")
    real = time.time()
    close = _hour_after(real + SETUP_BEFORE_S + 60)
    # To replay a given C (an ISO time). With C at 01:00 UTC this test found
    # three bugs (tests/alerts/test_evaluation.py has each): a restated
    # earlier hour resolved the alert dated at the hour in progress, which
    # then never paged; a restated day could never fire again; resolutions
    # were sent for firings that were history and never sent.
    if os.environ.get("LIVE_LOOP_CLOSE"):
        close = datetime.fromisoformat(os.environ["LIVE_LOOP_CLOSE"]).timestamp()
    clock = Clock(int(close - SETUP_BEFORE_S - real))
    plans = [
        Plan("chat", 4.0, more_pods_from=close - 20 * 60),  # mid-hour
        Plan("rag", 3.0, more_pods_from=close - 3600),  # on the hour boundary
        Plan("embed", 2.0),
        Plan("batch", 1.0, stops_at=close - BATCH_STOPS_S),
    ]
    fleet = Fleet(plans)
    start = (int(close) // 86400 - HISTORY_DAYS) * 86400 - 86400
    recent = int(clock.now() - 2 * 3600) // 60 * 60
    samples = fleet.history(
        tmp / "history.om", start=start, end=recent, step=HISTORY_STEP_S
    )
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
         "--max-block-duration=240h", str(tmp / "history.om"), str(tmp / "tsdb")],
        check=True, capture_output=True,
    )  # fmt: skip
    (tmp / "history.om").unlink()
    emulator = CostExplorerEmulator()
    first_bill, yesterday = bills(emulator, close=close)
    with (
        prometheus_server(
            tmp,
            "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
            "--storage.tsdb.retention.time=10y",
            "--web.enable-remote-write-receiver",
        ) as prometheus,
        receiver_in_namespace(tmp, secret=SECRET) as receiver,
        scratch_database("costapp_live") as database_url,
    ):
        feeder = Feeder(
            fleet, prometheus.url, clock=clock.now, start=recent, step=SCRAPE_S
        )
        feeder.catch_up()
        feeder.start()
        emulator_url = emulator.start()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "costapp.settings",
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": database_url,
            "PROMETHEUS_URL": prometheus.url,
            "TELEMETRY_SCRAPE_INTERVAL_S": str(SCRAPE_S),
            "COST_EXPLORER_ACCOUNTS": ACCOUNT,
            "AWS_ENDPOINT_URL": emulator_url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "COSTAPP_WEBHOOK_ALLOWED_NETWORKS": receiver.network,
            "ONCALL_WEBHOOK_SECRET": SECRET,
            "COSTAPP_VAR_DIR": str(tmp / "var"),
            "SITE_URL": "http://costapp.test",
        }
        env.pop("CELERY_BROKER_URL", None)
        env.pop("PAGE_CACHE_URL", None)
        try:
            yield {
                "clock": clock, "close": close, "env": env, "feeder": feeder,
                "receiver": receiver, "emulator": emulator, "database": database_url,
                "redis": redis_url, "yesterday": yesterday, "first_bill": first_bill,
                "history_start": start, "samples": samples,
            }  # fmt: skip
        finally:
            feeder.stop()
            emulator.stop()


def _setup(world: dict[str, Any], tmp: Path) -> None:
    """The documented start: migrate, the fleet, ten days of telemetry and
    bills, the recompute, then the rules (what they would page for in the
    history stood before them). In process: no broker yet."""
    env, clock = world["env"], world["clock"]
    (tmp / "var").mkdir(exist_ok=True)
    (tmp / "fleet.yaml").write_text(fleet_yaml(None))
    (tmp / "fleet-alerts.yaml").write_text(fleet_yaml(world["receiver"]))
    manage(env, clock, *compose_command("migrate")[2:])
    manage(env, clock, "fleet_load", str(tmp / "fleet.yaml"))
    manage(
        env, clock, "bills_backfill", "--account", ACCOUNT, "--start",
        world["first_bill"], "--end", world["yesterday"], "--tag-key", TAG, "--yes",
    )  # fmt: skip
    # Telemetry last: what the stack finds stored is as fresh as can be.
    end = datetime.fromtimestamp(clock.now(), UTC) + timedelta(hours=1)
    names = [a for n in ("chat", "rag", "embed", "batch") for a in ("--deployment", n)]
    out = manage(
        env, clock, "telemetry_backfill", *names,
        "--start", datetime.fromtimestamp(world["history_start"], UTC).isoformat(),
        "--end", end.replace(minute=0, second=0, microsecond=0).isoformat(),
        "--scrape-interval", str(SCRAPE_S), "--confirm",
    )  # fmt: skip
    assert "pipeline: ran here" in out, out
    manage(env, clock, "fleet_load", str(tmp / "fleet-alerts.yaml"))


READ_THE_OVERVIEW = """
from django.contrib.auth.models import Group, User
from django.test import Client
user, _ = User.objects.get_or_create(username="reader")
user.groups.set([Group.objects.get(name="finance")])
client = Client()
client.force_login(user)
status = client.get("/", HTTP_HOST="127.0.0.1").status_code
assert status == 200, status
"""


def _sql(database: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def _events(receiver: NamespacedReceiver, clock: Clock) -> list[dict[str, Any]]:
    """Every event received, with its arrival on the product's clock."""
    out = []
    for request in receiver.received():
        assert request["verified"], request
        for event in request["body"]["events"]:
            out.append({**event, "at": request["received_at"] + clock.delta})
    return out


def _first(events: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    found = [e for e in events if all(e.get(k) == v for k, v in match.items())]
    return min(found, key=lambda e: e["at"]) if found else None


def test_fresh_data_pages_on_time_through_the_stack_compose_runs(
    world: dict[str, Any], tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock, close, database = world["clock"], world["close"], world["database"]
    receiver: NamespacedReceiver = world["receiver"]
    _setup(world, tmp)
    assert world["feeder"].error is None, world["feeder"].error
    setup_events = _events(receiver, clock)
    assert setup_events == [], "the history stored before the rules paged someone"

    # The stack, LEAD_S before C: the clock jumps forward (the feeder pushes
    # what the engines were scraped for meanwhile), never back.
    clock.delta = max(clock.delta, int(close - LEAD_S - time.time()))
    receiver.clock_offset.write_text(str(clock.delta))
    if close - clock.now() < LEAD_S / 2:
        pytest.fail(
            f"the setup took too long: {close - clock.now():.0f} s left before C"
        )
    env = {
        **world["env"],
        "CELERY_BROKER_URL": world["redis"],
        "COSTAPP_SCHEDULE_TELEMETRY_REFRESH_S": str(REFRESH_S),
        "COSTAPP_SCHEDULE_ALERTS_EVALUATE_S": str(EVALUATE_S),
        "COSTAPP_SCHEDULE_PIPELINE_REAP_S": str(REAP_S),
        "COSTAPP_SCHEDULE_BILLS_REFRESH_S": str(BILLS_S),
        "COSTAPP_SCHEDULE_DELIVERIES_REAP_S": "30",
        "COSTAPP_PIPELINE_LEASE_S": str(LEASE_S),
        "COSTAPP_PIPELINE_REQUEUE_S": str(REQUEUE_S),
        # Shared by the web and the workers, as in compose.
        "PAGE_CACHE_URL": world["redis"],
    }
    # A reader opens the overview before C: the live worker renders it again
    # after each refresh (the pipeline's pages step, costapp/pagewarm.py).
    manage(env, clock, "shell", "-c", READ_THE_OVERVIEW)
    stack = Stack(env, clock, tmp, {})
    try:
        for name in WORKERS:
            stack.start(name)
        started = clock.now()
        # A backfill on the same stack, queued as the telemetry page queues
        # one, shortly before C so that it runs across the close: nine days
        # of every deployment in small reads on the ingest worker, then its
        # recompute from nine days back on the live one.
        wait_until(clock.now, close - BACKFILL_BEFORE_S)
        manage(
            env, clock, "shell", "-c",
            "from datetime import timedelta; from django.utils import timezone; "
            "from costapp.tasks import ingest_runs_queue; "
            "from costapp.telemetry.services import telemetry_run_create; "
            "end = timezone.now().replace(minute=0, second=0, microsecond=0); "
            "run = telemetry_run_create(deployments=['chat', 'rag', 'embed', 'batch'], "
            f"start=end - timedelta(days={HISTORY_DAYS - 1}), end=end, "
            "options={'slice_hours': 1, 'chunk_s': 120}, confirmed=True); "
            "ingest_runs_queue([run])",
        )  # fmt: skip

        deadline = close + SETTLE_S + BOUND_S + 30
        wanted = {"chat", "rag", "embed", "batch"}
        while clock.now() < deadline:
            events = _events(receiver, clock)
            paged = {e["name"] for e in events if e["kind"] == "firing"}
            if wanted <= paged:
                break
            for name, proc in stack.procs.items():
                assert proc.poll() is None, (
                    name,
                    (tmp / f"{name}.log").read_text()[-3000:],
                )
            time.sleep(1)
        events = _events(receiver, clock)
        hourly = "unit cost drift, hourly"
        pages = {
            name: _first(events, rule=hourly, name=name, kind="firing")
            for name in ("chat", "rag")
        }
        logs = {n: (tmp / f"{n}.log").read_text()[-4000:] for n in WORKERS}
        assert all(pages.values()), (events, logs["live-worker"], logs["alerts-worker"])
        closed_at = close + SETTLE_S
        delays = {name: page["at"] - closed_at for name, page in pages.items()}
        for name, page in pages.items():
            assert page["at"] >= closed_at, f"{name} paged before its hour closed"
            assert delays[name] <= BOUND_S, (name, delays[name])
            assert (
                page["data_time"]
                == datetime.fromtimestamp(close - 3600, UTC).isoformat()
            )
            assert page["late_s"] is None
            assert page["value"] >= 1.2 * page["baseline"]
        billed = _first(events, rule="embed billed day", name="embed", kind="firing")
        assert billed is not None, events
        assert billed["data_time"].startswith(world["yesterday"])
        # Late by the time from the day's close to the page (under an hour
        # when C is 01:00, half a day when it is noon).
        day_closed = (close - 3600) // 86400 * 86400 + SETTLE_S
        assert billed["late_s"] is not None and billed["late_s"] > BOUND_S
        assert abs(billed["late_s"] - (billed["at"] - day_closed)) < 30, billed
        stale = [e for e in events if e["rule"] == "telemetry stale"]
        assert [(e["name"], e["kind"]) for e in stale] == [("batch", "firing")], stale
        stale_at = close - BATCH_STOPS_S + STALE_AFTER_H * 3600
        # No false pages: embed's hours, batch's, and nothing resolved while
        # chat and rag stay regressed (the partial hour after C is not judged).
        assert not _first(events, rule=hourly, name="embed")
        assert not [e for e in events if e["kind"] == "resolved"], events

        # The backfill ran across the close on the ingest worker.
        (backfill,) = _sql(
            database,
            "SELECT status, started_at, finished_at FROM costapp_ingestrun "
            "WHERE params->>'slice_hours' = '1'",
        )

        # After the refreshes, the live worker rendered the overview the
        # reader opened (the step logs how many bodies it replayed).
        replays = re.findall(
            r"pipeline step pages done in [\d.]+ s .*: (\d+) rows",
            (tmp / "live-worker.log").read_text(),
        )
        assert replays and max(map(int, replays)) >= 1, replays

        # The live worker killed while it recomputes: the figures trail the
        # data by at most the lease plus the reaper's period afterwards.
        recovered_in = _kill_mid_recompute(stack, database, clock)

        with capsys.disabled():
            print(
                "\nlive loop, measured on the product's clock "
                f"(refresh {REFRESH_S} s, evaluation {EVALUATE_S} s, settle "
                f"{SETTLE_S} s, bound {BOUND_S} s):"
            )
            for name, delay in delays.items():
                print(f"  {name}: paged {delay:.1f} s after its hour closed")
            print(
                f"  embed's billed day: paged {billed['at'] - started:.1f} s after "
                f"the stack started, late by {billed['late_s'] / 3600:.1f} h"
            )
            print(
                f"  batch: stale page {stale[0]['at'] - stale_at:.1f} s after it went stale"
            )
            until = (
                f"{backfill[2].timestamp() - closed_at:+.1f} s"
                if backfill[2]
                else "after the test"
            )
            print(
                f"  backfill on the same stack: {backfill[0]}, ran from "
                f"{backfill[1].timestamp() - closed_at:+.1f} s of the close to {until}"
            )
            print(
                f"  live worker killed mid-recompute: figures current {recovered_in:.1f} s later"
            )
        # It was running when the hour closed: it delayed none of the pages.
        assert backfill[0] in ("running", "succeeded", "partial"), backfill
        assert backfill[1].timestamp() < closed_at, backfill
        assert backfill[2] is None or backfill[2].timestamp() > closed_at, backfill
        assert recovered_in <= LEASE_S + REAP_S + 30, recovered_in
    finally:
        stack.stop_all()


def _kill_mid_recompute(stack: Stack, database: str, clock: Clock) -> float:
    """SIGKILL the live worker while it holds the unit-cost step's lease,
    start it again (compose's restart policy), and time how long until the
    version it was recomputing is consumed."""
    deadline = time.monotonic() + 3 * REFRESH_S
    version = None
    while time.monotonic() < deadline:
        rows = _sql(
            database,
            "SELECT lease_owner, inflight_version FROM costapp_pipelinestep "
            "WHERE name = 'unit_costs'",
        )
        if rows and rows[0][0]:
            version = rows[0][1]
            stack.kill("live-worker")
            break
        time.sleep(0.02)
    assert version is not None, "no recompute ran while the test watched"
    killed = time.monotonic()
    stack.start("live-worker")
    while time.monotonic() < killed + 120:
        (consumed,) = _sql(
            database,
            "SELECT consumed FROM costapp_pipelinestep WHERE name = 'unit_costs'",
        )[0]
        if consumed >= version:
            return time.monotonic() - killed
        time.sleep(0.2)
    raise AssertionError("the killed recompute was never done again")
