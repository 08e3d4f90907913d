"""Thin Celery tasks: ids in, a service call, nothing else."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from costapp.economics.tasks import unit_costs_recompute_queue
from costapp.ingest import ingest_run_execute
from costapp.models import IngestRun
from costapp.sources.registry import source_for_run

logger = logging.getLogger(__name__)


@shared_task(acks_late=True)
def ingest_run_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return None
    try:
        source = source_for_run(run)
        run = ingest_run_execute(run=run, source=source)
    except Exception as exc:  # task edge: record any failure on the run
        logger.exception("ingest run %s crashed", run_id)
        IngestRun.objects.filter(pk=run_id).update(
            status=IngestRun.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )
        raise
    if run.status in (IngestRun.SUCCEEDED, IngestRun.PARTIAL):
        # Pipeline order: ingest, then the figures it changed (then alerts).
        unit_costs_recompute_queue(run.pk)
    return run.status


@shared_task
def runs_reap_task() -> int:
    """Mark runs whose worker died (SIGKILL, OOM) failed once past the hard limit."""
    cutoff = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    return IngestRun.objects.filter(
        status=IngestRun.RUNNING, started_at__lt=cutoff
    ).update(
        status=IngestRun.FAILED,
        error="the worker stopped before the run finished (killed or timed out); rerun it",
        finished_at=timezone.now(),
    )
