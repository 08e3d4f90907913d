from __future__ import annotations

import logging
import math
import os
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from celery import Celery, signals
from celery.schedules import schedstate, schedule
from django.db import close_old_connections, connection, connections

from costapp.schedule import ENTRIES, align_offset_s, beat_schedule, period_s

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

logger = logging.getLogger(__name__)

app = Celery("costapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    [
        "costapp",
        "costapp.costs",
        "costapp.telemetry",
        "costapp.capacity",
        "costapp.fleet",
        "costapp.pipeline",
    ]
)


class aligned(schedule):
    """Every ``period`` seconds at ``offset`` past each multiple of it (UTC
    epoch), whenever beat started (costapp.schedule: aligned entries)."""

    def __init__(self, period: float, offset: float, **kwargs: Any) -> None:
        super().__init__(run_every=timedelta(seconds=period), **kwargs)
        self.period = period
        self.offset = offset % period

    def _next_after(self, t: float) -> float:
        return (math.floor((t - self.offset) / self.period) + 1) * self.period + (
            self.offset
        )

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = self.now().timestamp()
        due_at = self._next_after(self.maybe_make_aware(last_run_at).timestamp())
        if now >= due_at:
            return schedstate(True, self._next_after(now) - now)
        return schedstate(False, due_at - now)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.period, self.offset)

    def __repr__(self) -> str:
        return f"<aligned: every {self.period:g} s at +{self.offset:g} s>"


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    entries = beat_schedule()
    for entry in ENTRIES:
        if entry.aligned:
            entries[entry.name]["schedule"] = aligned(
                period_s(entry), align_offset_s(entry)
            )
    sender.conf.beat_schedule = entries


@signals.worker_init.connect
def _refuse_unusable_channel_secrets(sender: Any = None, **_: object) -> None:
    """The worker on the alerts queue exits 1 while a channel's settings cannot
    be decrypted, saying how to fix it: started, it would fail every delivery.
    Celery logs and swallows an exception from a signal handler; SystemExit
    is not one."""
    if sender is None:
        return
    # lazy: app loading. costapp/__init__.py imports this module while the
    # settings load, before the app registry is ready, and checks imports models.
    from costapp.alerts.checks import worker_start_refusal

    refusal = worker_start_refusal(sender.app.amqp.queues.consume_from)
    connections.close_all()  # not inherited by the pool's processes
    if refusal:
        raise SystemExit(refusal)  # printed on stderr: logging is not set up yet


def beat_in_process(stop: threading.Event) -> None:
    """The embedded demo's beat (no broker): each entry's task, at its period,
    called on this thread, so rules made in the UI are evaluated and a dead
    step is picked up as under compose. Returns when ``stop`` is set."""
    # The task modules a worker would import (autodiscovery), here.
    app.loader.import_default_modules()
    due = {e.name: time.monotonic() + period_s(e) for e in ENTRIES}
    try:
        while not stop.wait(1.0):
            for entry in ENTRIES:
                if time.monotonic() < due[entry.name]:
                    continue
                due[entry.name] = time.monotonic() + period_s(entry)
                try:
                    app.tasks[entry.task].apply(throw=True)
                except Exception:  # a thread edge: log it, the next period retries
                    logger.exception("in-process beat: %s failed", entry.name)
                finally:
                    close_old_connections()
    finally:
        connection.close()  # this thread's own
