"""Thin Celery tasks of unit economics: ids in, a service call."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from costapp.alerts.tasks import alert_rules_evaluate_task
from costapp.economics.idle import idle_figures_recompute
from costapp.economics.inputs import run_changes
from costapp.economics.services import unit_costs_recompute
from costapp.models import IngestRun

logger = logging.getLogger(__name__)


@shared_task(acks_late=True)
def unit_costs_recompute_task(run_id: int) -> int | None:
    """After an ingest: recompute what the run changed (its series and their
    pool siblings, from its first day on). Returns the rows written."""
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None or run.status not in (IngestRun.SUCCEEDED, IngestRun.PARTIAL):
        return None
    since, series = run_changes(run)
    result = unit_costs_recompute(now=timezone.now(), since=since, series=series)
    # Idle prices headroom at the day figures just written: after them.
    idle_figures_recompute(now=timezone.now(), since=since, series=series)
    # Pipeline order: ingest -> figures -> alerts (tasks import tasks that way
    # only). The recompute has committed its figures when it returns.
    alert_rules_evaluate_task.delay()
    return result.rows_written


@shared_task
def unit_costs_recompute_all_task() -> int:
    """Beat: the full recompute, so nothing an incremental one missed (a
    fleet file edit, a rate card entered by hand) stays stale for long."""
    rows = unit_costs_recompute(now=timezone.now()).rows_written
    idle_figures_recompute(now=timezone.now())
    return rows


def unit_costs_recompute_queue(run_id: int) -> None:
    """Queue the recompute once the run's rows are committed."""
    unit_costs_recompute_task.delay_on_commit(run_id)
