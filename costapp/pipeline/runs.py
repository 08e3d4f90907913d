"""The one run executor: a stored ingest run, whatever its source, executed,
then what follows its data requested.

Tasks and commands alike call ``run_execute``; it never queues. It returns
the steps it requested, and the caller either queues them
(``costapp.pipeline.tasks.pipeline_queue``) or runs them here
(``costapp.pipeline.runner.pipeline_drain``), and says which.
"""

from __future__ import annotations

import logging
from datetime import datetime

from costapp.costs.services import bills_claims_release, focus_import_execute
from costapp.economics.unit_costs.inputs import series_siblings
from costapp.ingest import ingest_run_execute
from costapp.models import DeploymentHour, IngestRun
from costapp.pipeline.change import Change
from costapp.pipeline.services import pipeline_request
from costapp.pipeline.steps import ENTRY_STEPS
from costapp.sources.base import SourceError
from costapp.sources.registry import source_for_run

logger = logging.getLogger(__name__)

# What kind of data each source stores.
SOURCE_KINDS = {
    "prometheus": "telemetry",
    "cost_explorer": "bills",
    "focus": "bills",
    "demo": "both",
}


def run_execute(
    run: IngestRun, *, trusted: bool = False
) -> tuple[IngestRun, list[str]]:
    """Execute ``run`` (an operator's ``trusted`` FOCUS import may name a
    local path) and request the pipeline for what it stored; returns the run
    and the steps requested. A run already finished is left as it is. Whatever
    happens, the run does not stay "running"."""
    if run.finished:
        return run, []
    try:
        if run.source == "focus":
            run = focus_import_execute(run=run, trusted=trusted)
        else:
            try:
                source = source_for_run(run)
            except SourceError as exc:
                run.fail(str(exc))
            else:
                run = ingest_run_execute(run=run, source=source)
    except Exception as exc:  # task and command edge: record, then re-raise
        logger.exception("ingest run %s crashed", run.pk)
        run.fail(f"{type(exc).__name__}: {exc}")
        bills_claims_release(run=run)
        # What it stored before crashing is data too.
        run_followups(run)
        raise
    # A failed Cost Explorer run gives back the months it did not store.
    bills_claims_release(run=run)
    return run, run_followups(run)


def run_change(run: IngestRun) -> Change | None:
    """What a run changed: a bill changes every series of its days (the
    allocation splits them anew); telemetry the deployments it wrote hours
    for and their pool siblings, over its window. None: nothing stored."""
    kind = SOURCE_KINDS.get(run.source)
    if kind is None:
        return None
    if kind in ("bills", "both"):
        return Change.of(since=run.window_start, until=run.window_end)
    names = set(
        DeploymentHour.objects.filter(run=run)
        .values_list("deployment__name", flat=True)
        .distinct()
    )
    if not names:
        return None
    return Change.of(
        since=run.window_start, until=run.window_end, series=series_siblings(names)
    )


def run_followups(run: IngestRun, *, now: datetime | None = None) -> list[str]:
    """Request the entry steps of the run's kind of data for what it stored;
    returns them (empty when it stored nothing)."""
    run.refresh_from_db()
    if run.status not in (IngestRun.SUCCEEDED, IngestRun.PARTIAL, IngestRun.FAILED):
        return []
    if run.status == IngestRun.FAILED and not run.rows_written:
        return []
    change = run_change(run)
    if change is None:
        return []
    return pipeline_request(
        steps=ENTRY_STEPS[SOURCE_KINDS[run.source]], change=change, now=now
    )
