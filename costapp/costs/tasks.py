"""Thin Celery tasks of the bills area: ids and ISO dates in, a service call,
then the queueing of what the service returned."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from celery import shared_task
from django.utils import timezone

from costapp.costs.services import bills_refresh_create, month_export_due
from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute
from costapp.pipeline.tasks import pipeline_queue


@shared_task
def bills_refresh_task(today: str | None = None) -> list[int]:
    """Beat (live queue): re-pull the trailing window of every account here,
    one run after the other (a few Cost Explorer pages each), then send what
    follows them. A backfill waiting on the ingest queue never delays it."""
    runs = bills_refresh_create(today=date.fromisoformat(today) if today else None)
    steps: list[str] = []
    for run in runs:
        run, requested = run_execute(run)
        steps += requested
    pipeline_queue(steps)
    return [run.pk for run in runs]


@shared_task
def month_export_task(today: str | None = None) -> list[str]:
    """Beat: the previous month's finance export to COSTAPP_MONTHLY_EXPORT_TO,
    once the month is COSTAPP_MONTHLY_EXPORT_AFTER_DAYS old; what it wrote."""
    return month_export_due(
        today=date.fromisoformat(today) if today else timezone.now().date()
    )


@shared_task(acks_late=True)
def focus_import_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    upload = (run.params or {}).get("upload")
    try:
        run, steps = run_execute(run)
    finally:
        # An upload is read once; it never outlives its import, whatever the
        # outcome (a rerun needs a new upload).
        if upload:
            Path(upload).unlink(missing_ok=True)
    pipeline_queue(steps)
    return run.status
