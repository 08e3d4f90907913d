"""What each pipeline step does (``costapp.pipeline.steps`` names them): the
areas' services, given the merged change and the time."""

from __future__ import annotations

from datetime import UTC, date, datetime

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.costs.shares import cost_shares_rebuild
from costapp.economics.forecasts.services import month_forecasts_store
from costapp.economics.idle.services import idle_figures_recompute
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.pagewarm import pages_warm
from costapp.pipeline.change import Change
from costapp.pipeline.steps import Outcome
from costapp.telemetry.rollups import rollups_for_change


def _day(when: datetime | None) -> date | None:
    return when.astimezone(UTC).date() if when is not None else None


def rollups(change: Change, now: datetime) -> Outcome:
    return Outcome(
        rows=rollups_for_change(
            since=change.since, until=change.until, deployments=change.series
        )
    )


def cost_shares(change: Change, now: datetime) -> Outcome:
    # The days a run or a rule change made stale (the stored split knows
    # which); the change itself is not needed.
    return Outcome(rows=cost_shares_rebuild(stale_only=True).days)


def unit_costs(change: Change, now: datetime) -> Outcome:
    result = unit_costs_recompute(
        now=now,
        since=_day(change.since),
        series=change.series,
    )
    return Outcome(rows=result.rows_written)


def idle(change: Change, now: datetime) -> Outcome:
    result = idle_figures_recompute(
        now=now,
        since=_day(change.since),
        series=change.series,
    )
    return Outcome(rows=result.rows_written)


def forecasts(change: Change, now: datetime) -> Outcome:
    return Outcome(rows=month_forecasts_store(now=now, since=_day(change.since)))


def alerts(change: Change, now: datetime) -> Outcome:
    return Outcome(deliveries=tuple(alert_rules_evaluate(now=now)))


def pages(change: Change, now: datetime) -> Outcome:
    # Renders what readers asked for last; the change does not say which.
    return Outcome(rows=pages_warm().replayed)
