"""Reads of the pipeline's state: for the pages' "figures are older than the
data" note, /metrics and the admin."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Max

from costapp.models import IngestRun, PipelineStep
from costapp.pipeline.steps import STEPS

# Steps whose pending work means the unit-cost figures rest on older data
# than is stored.
FIGURE_STEPS = ("cost_shares", "unit_costs")
# A recompute takes seconds after every refresh: a note that came and went
# with each would be noise. Past this, the pages say so.
BEHIND_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class StepStatus:
    name: str
    title: str
    queue: str
    behind: bool
    waiting_since: datetime | None  # the oldest data not yet consumed
    running: bool
    last_success_at: datetime | None
    last_duration_s: float | None
    last_lag_s: float | None
    runs: int
    failures: int
    last_error: str


def pipeline_status(*, now: datetime) -> list[StepStatus]:
    rows = {r.name: r for r in PipelineStep.objects.all()}
    out = []
    for name, step in STEPS.items():
        row = rows.get(name)
        if row is None:
            out.append(
                StepStatus(name, step.title, step.queue, False, None, False,
                           None, None, None, 0, 0, "")
            )  # fmt: skip
            continue
        leased = bool(row.lease_owner) and bool(
            row.lease_until and row.lease_until > now
        )
        waiting = [t for t in (row.pending_since, row.inflight_since) if t]
        if row.inflight is not None and not waiting and row.started_at:
            waiting = [row.started_at]
        out.append(
            StepStatus(
                name=name,
                title=step.title,
                queue=step.queue,
                behind=row.pending is not None or row.inflight is not None,
                waiting_since=min(waiting) if waiting else None,
                running=leased,
                last_success_at=row.last_success_at,
                last_duration_s=row.last_duration_s,
                last_lag_s=row.last_lag_s,
                runs=row.runs,
                failures=row.failures,
                last_error=row.last_error,
            )
        )
    return out


@dataclass(frozen=True)
class FiguresBehind:
    since: datetime  # the oldest stored data not yet in the figures
    figures_at: datetime | None  # when the figures were last brought up to date
    running: bool
    error: str


def figures_behind(*, now: datetime) -> FiguresBehind | None:
    """When the unit-cost figures rest on older data than is stored, and have
    for longer than a recompute takes: what the pages say."""
    rows = [s for s in pipeline_status(now=now) if s.name in FIGURE_STEPS]
    waiting = [s.waiting_since for s in rows if s.behind and s.waiting_since]
    if not waiting or now - min(waiting) < BEHIND_AFTER:
        return None
    done = [s.last_success_at for s in rows if s.name == "unit_costs"]
    return FiguresBehind(
        since=min(waiting),
        figures_at=done[0] if done else None,
        running=any(s.running for s in rows),
        error=next((s.last_error for s in rows if s.last_error), ""),
    )


def last_refreshes() -> dict[str, datetime | None]:
    """When each kind of refresh last finished with data (Prometheus, Cost
    Explorer, FOCUS, the demo)."""
    rows = (
        IngestRun.objects.filter(status__in=[IngestRun.SUCCEEDED, IngestRun.PARTIAL])
        .values("source")
        .annotate(last=Max("finished_at"))
    )
    return {r["source"]: r["last"] for r in rows}
