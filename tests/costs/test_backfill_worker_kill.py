"""A real Celery worker killed (SIGKILL) in the middle of a multi-page backfill:
after a restart and a rerun the database equals an uninterrupted run's."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import fields
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

from costapp.costs.services import bills_backfill_create
from costapp.ingest import ingest_run_create, ingest_run_execute
from costapp.models import CostLine, IngestRun
from costapp.sources.base import CostRecord, Window
from costapp.sources.registry import source_for_run
from costapp.tasks import ingest_run_task
from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.costs.conftest import ACCOUNT, cost_lines, utc
from tests.support.services import ROOT, stop, wait_for

pytestmark = [pytest.mark.integration]
CELERY = str(ROOT / ".venv" / "bin" / "celery")


def database_url() -> str:
    db = settings.DATABASES["default"]
    user = quote(str(db.get("USER", "")))
    password = quote(str(db.get("PASSWORD", "")))
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or "5432"
    return f"postgres://{user}:{password}@{host}:{port}/{db['NAME']}"


class Worker:
    def __init__(self, queue: str, env: dict[str, str], log: Path) -> None:
        self.queue, self.env, self.log = queue, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.write_text("")
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                CELERY,
                "-A",
                "costapp",
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "-Q",
                self.queue,
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        wait_for(
            lambda: "ready." in self.log.read_text(),
            timeout=60,
            what=f"celery worker (log {self.log})",
        )

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


@pytest.fixture
def celery_broker(redis_url: str) -> Iterator[str]:
    """Make this process send tasks to Redis (not run them eagerly)."""
    from costapp.celery import app

    def reset_connections() -> None:
        # Earlier eager tests may have opened a pool for the empty broker URL.
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None
        # kombu's process-wide registry still holds producer pools bound to the
        # connection pool closed above; a later eager task would acquire one.
        from kombu import pools

        pools.reset()

    saved = {k: app.conf.get(k) for k in ("broker_url", "task_always_eager")}
    reset_connections()
    app.conf.update(broker_url=redis_url, task_always_eager=False)
    yield redis_url
    app.conf.update(saved)
    reset_connections()


def wait_run(pk: int, predicate, timeout: float = 90) -> IngestRun:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = IngestRun.objects.get(pk=pk)
        if predicate(run):
            return run
        time.sleep(0.1)
    raise TimeoutError(f"run {pk}: {IngestRun.objects.get(pk=pk).__dict__}")


def test_a_killed_worker_then_a_rerun_leaves_the_same_bill_as_an_uninterrupted_run(
    postgres_only: None,
    transactional_db: None,
    celery_broker: str,
    ce: CostExplorerEmulator,
    tmp_path: Path,
) -> None:
    day = date(2025, 1, 1)
    while day < date(2025, 4, 1):
        for usage, amount in (
            ("BoxUsage:p5.48xlarge", "1320.9612345678"),
            ("DataTransfer-Out-Bytes", "0.0000000001"),
        ):
            ce.add(Line(ACCOUNT, day.isoformat(), usage, amount))
        day += timedelta(days=1)
    ce.page_size = 8  # about 12 pages a month...
    ce.delay_s = 0.15  # ...slow enough to kill the worker between months
    queue = f"bills-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": celery_broker,
        "DJANGO_SETTINGS_MODULE": "costapp.settings",
    }
    worker = Worker(queue, env, tmp_path / "worker.log")
    try:
        worker.start()
        (first,) = bills_backfill_create(
            account_ids=[ACCOUNT], start=date(2025, 1, 1), end=date(2025, 4, 1)
        )
        # The test's own queue, so no other worker on this broker takes it.
        ingest_run_task.apply_async((first.pk,), queue=queue)
        wait_run(first.pk, lambda r: r.steps_done >= 1)
        worker.kill()
        killed = IngestRun.objects.get(pk=first.pk)
        assert killed.status == IngestRun.RUNNING
        assert 1 <= killed.steps_done < killed.steps_total == 3
        assert CostLine.objects.exists()

        worker.start()
        (second,) = bills_backfill_create(
            account_ids=[ACCOUNT], start=date(2025, 1, 1), end=date(2025, 4, 1)
        )
        ingest_run_task.apply_async((second.pk,), queue=queue)
        done = wait_run(second.pk, lambda r: r.finished)
        assert done.status == IngestRun.SUCCEEDED, done.error
    finally:
        worker.stop()
    after_rerun = cost_lines()

    # The reference: the same backfill, never interrupted, in this process.
    CostLine.objects.all().delete()
    ce.delay_s = 0
    reference = ingest_run_create(
        source="cost_explorer",
        window=Window(utc(2025, 1, 1), utc(2025, 4, 1)),
        target=ACCOUNT,
        params=first.params,
    )
    ingest_run_execute(run=reference, source=source_for_run(reference))
    assert after_rerun == cost_lines()
    assert len(after_rerun) == 90 * 2
    amortized = 1 + [f.name for f in fields(CostRecord)].index("amortized_cost")
    total = sum(line[amortized] for line in after_rerun)
    assert total == 90 * (Decimal("1320.9612345678") + Decimal("0.0000000001"))
