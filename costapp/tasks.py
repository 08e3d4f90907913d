"""Thin Celery tasks: ids in, a service call, nothing else.

Queueing is one-way: services return rows, and callers queue them here after
the service returns (``delay_on_commit``: the task never runs before the row it
reads is committed). Queues are chosen by ``CELERY_TASK_ROUTES``, not by
arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from costapp import pagecache
from costapp.costs.services import bills_claims_release
from costapp.economics.tasks import unit_costs_recompute_queue
from costapp.ingest import ingest_run_execute
from costapp.models import IngestRun
from costapp.sources.registry import source_for_run

logger = logging.getLogger(__name__)


def _claims_release(run_id: int) -> None:
    # A failed Cost Explorer run gives back the months it did not store.
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is not None:
        bills_claims_release(run=run)


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
        _claims_release(run_id)
        raise
    _claims_release(run_id)
    if run.status in (IngestRun.SUCCEEDED, IngestRun.PARTIAL):
        # Pipeline order: ingest, then the figures it changed (then alerts).
        unit_costs_recompute_queue(run.pk)
    return run.status


def ingest_runs_queue(runs: Iterable[IngestRun]) -> None:
    """Queue each run's ingest once the transaction that created it commits
    (a worker never looks for a row it cannot see yet)."""
    for run in runs:
        ingest_run_task.delay_on_commit(run.pk)


@shared_task
def runs_reap_task() -> int:
    """Mark runs whose worker died (SIGKILL, OOM) failed once past the hard limit."""
    cutoff = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    dead = IngestRun.objects.filter(status=IngestRun.RUNNING, started_at__lt=cutoff)
    # An UPDATE of no rows still counts as a write for the page cache (its
    # triggers are per statement): every ten minutes, it would drop them all.
    if not dead.exists():
        return 0
    return dead.update(
        status=IngestRun.FAILED,
        error="the worker stopped before the run finished (killed or timed out); rerun it",
        finished_at=timezone.now(),
    )


@shared_task
def data_changes_compact_task() -> int:
    """Fold the page cache's record of writes into its total row, so the
    version every cached page reads stays one small query."""
    return pagecache.changes_compact()
