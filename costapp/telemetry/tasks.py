"""Thin Celery tasks of the telemetry area."""

from __future__ import annotations

from celery import shared_task

from costapp.pipeline.runs import run_execute
from costapp.pipeline.tasks import pipeline_queue
from costapp.telemetry.services import telemetry_refresh_create


# No retry: every Prometheus failure (unreachable, 5xx, a refused query) is a
# SourceError that ingest records on the run, so the task itself never raises
# one. The next beat re-reads the same hours anyway.
@shared_task
def telemetry_refresh_task() -> int | None:
    """Beat (live queue): re-pull the last few hours in this task, then send
    what follows them (see telemetry_refresh_create)."""
    run = telemetry_refresh_create()
    if run is None:
        return None
    run, steps = run_execute(run)
    pipeline_queue(steps)
    return run.pk
