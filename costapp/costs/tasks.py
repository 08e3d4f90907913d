"""Thin Celery tasks of the bills area: ids and ISO dates in, a service call."""

from __future__ import annotations

from datetime import date

from celery import shared_task

from costapp.costs.services import bills_refresh, focus_import_execute
from costapp.models import IngestRun


@shared_task
def bills_refresh_task(today: str | None = None) -> list[int]:
    """Beat: re-pull the trailing window; each account's run is its own task."""
    runs = bills_refresh(today=date.fromisoformat(today) if today else None)
    return [run.pk for run in runs]


@shared_task(acks_late=True)
def focus_import_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return None
    return focus_import_execute(run=run).status
