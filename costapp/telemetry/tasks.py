"""Thin Celery tasks of the telemetry area."""

from __future__ import annotations

from celery import shared_task

from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute
from costapp.pipeline.tasks import pipeline_queue
from costapp.telemetry.services import telemetry_refresh_create


# No retry: every Prometheus failure (unreachable, 5xx, a refused query) is a
# SourceError that ingest records on the run, so the task itself never raises
# one. The next beat re-reads the same hours anyway.
@shared_task
def telemetry_refresh_task() -> list[int]:
    """Beat (live queue): re-pull the last few hours. The first part is read
    in this task; a fleet larger than TELEMETRY_REFRESH_SPLIT is read in
    parts, the others sent to the live queue, so that as many live worker
    slots as there are read it at once. Each part sends what follows it; the
    pipeline merges them into one recompute."""
    runs = telemetry_refresh_create()
    for run in runs[1:]:
        telemetry_refresh_run_task.delay_on_commit(run.pk)
    if runs:
        telemetry_refresh_run_task(runs[0].pk)
    return [run.pk for run in runs]


@shared_task
def telemetry_refresh_run_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return None
    run, steps = run_execute(run)
    pipeline_queue(steps)
    return run.status
