"""Thin Celery tasks: ids in, a service call, nothing else.

Queueing is one-way: services return rows, and callers queue them here after
the service returns (``delay_on_commit``: the task never runs before the row it
reads is committed). Queues are chosen by ``CELERY_TASK_ROUTES``, not by
arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from costapp import pagecache
from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute, run_followups
from costapp.pipeline.tasks import pipeline_queue


@shared_task(acks_late=True)
def ingest_run_task(run_id: int) -> str | None:
    run = IngestRun.objects.filter(pk=run_id).first()
    if run is None or run.finished:
        return None
    run, steps = run_execute(run)
    pipeline_queue(steps)
    return run.status


def ingest_runs_queue(runs: Iterable[IngestRun]) -> None:
    """Queue each run's ingest once the transaction that created it commits
    (a worker never looks for a row it cannot see yet)."""
    for run in runs:
        ingest_run_task.delay_on_commit(run.pk)


@shared_task
def runs_reap_task() -> int:
    """Mark runs whose worker died (SIGKILL, OOM) failed once past the hard
    limit; what they stored before dying goes through the pipeline."""
    cutoff = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)
    # An UPDATE of no rows still counts as a write for the page cache (its
    # triggers are per statement): every ten minutes, it would drop them all.
    dead = list(
        IngestRun.objects.filter(status=IngestRun.RUNNING, started_at__lt=cutoff)
    )
    steps: list[str] = []
    for run in dead:
        run.finish(
            IngestRun.PARTIAL if run.rows_written else IngestRun.FAILED,
            error="the worker stopped before the run finished (killed or timed "
            "out); rerun it",
        )
        steps += run_followups(run)
    pipeline_queue(steps)
    return len(dead)


@shared_task
def data_changes_compact_task() -> int:
    """Fold the page cache's record of writes into its total row, so the
    version every cached page reads stays one small query."""
    return pagecache.changes_compact()
