"""Thin Celery tasks of the bills area: ids and ISO dates in, a service call,
then the queueing of what the service returned."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from celery import shared_task

from costapp.costs.services import bills_refresh_create, focus_import_execute
from costapp.economics.tasks import unit_costs_recompute_queue
from costapp.models import IngestRun
from costapp.tasks import ingest_runs_queue


@shared_task
def bills_refresh_task(today: str | None = None) -> list[int]:
    """Beat: re-pull the trailing window; each account's run is its own task."""
    runs = bills_refresh_create(today=date.fromisoformat(today) if today else None)
    ingest_runs_queue(runs)
    return [run.pk for run in runs]


@shared_task(acks_late=True)
def focus_import_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    upload = (run.params or {}).get("upload")
    try:
        if run.finished:
            return None
        run = focus_import_execute(run=run)
    finally:
        # An upload is read once; it never outlives its import, whatever the
        # outcome (a rerun needs a new upload).
        if upload:
            Path(upload).unlink(missing_ok=True)
    if run.status in (IngestRun.SUCCEEDED, IngestRun.PARTIAL):
        # Pipeline order, as after every ingest: the bill it replaced changes
        # every series from the run's first day (then alerts).
        unit_costs_recompute_queue(run.pk)
    return run.status
