"""A series' month-end forecast computed from what is stored: its daily
spend (the figures, bill lines split by record type) simulated to the end of
the month by ``analytics.forecast``. ``services`` stores what this computes;
``selectors`` falls back to it when no stored forecast fits."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pandas as pd

from analytics.allocation import IDLE, Share
from analytics.forecast import MonthForecast, forecast_month
from costapp.costs.allocations import allocation_days_read
from costapp.costs.selectors import DEFAULT_BASIS
from costapp.economics.figures import figures_read
from costapp.models import CostLine, Deployment


def _scope_member(scope: str, name: str) -> Callable[[Share], bool]:
    """Whether an allocated share is in the series' cost, as the figures
    define it (analytics.unit_cost_frames): a deployment its direct share; a
    pool its members and its idle; a team its deployments and the idle of the
    pools it alone uses (a shared pool's idle is the fleet's); the fleet every
    share, unallocated included."""
    if scope == "fleet":
        return lambda share: True
    if scope == "deployment":
        return lambda share: share.target == name
    known = list(Deployment.objects.values_list("name", "team", "pool__name"))
    if scope == "pool":
        members = {d for d, _, p in known if p == name}
        return lambda share: (
            share.target in members or (share.target == IDLE and share.pool == name)
        )
    teams_of_pool: dict[str, set[str]] = {}
    for _, team, pool in known:
        if pool:
            teams_of_pool.setdefault(pool, set()).add(team)
    owned = {p for p, teams in teams_of_pool.items() if teams == {name}}
    mine = {d for d, team, _ in known if team == name}
    return lambda share: (
        share.target in mine or (share.target == IDLE and share.pool in owned)
    )


def bill_by_record_type_read(
    scope: str, name: str, currency: str, start: date, end: date
) -> dict[date, dict[str, float]]:
    """Per UTC day with a bill: the series' allocated bill by the record type
    of each bill line (``end`` exclusive)."""
    member = _scope_member(scope, name)
    picked: list[tuple[date, str, Decimal]] = []
    for (_, day, cur), allocation in allocation_days_read(
        start, end, DEFAULT_BASIS
    ).items():
        if cur == currency:
            picked.extend(
                (day, s.line_key, s.amount) for s in allocation.shares if member(s)
            )
    keys = {int(key) for _, key, _ in picked}
    kinds = dict(CostLine.objects.filter(pk__in=keys).values_list("pk", "record_type"))
    out: dict[date, dict[str, Decimal]] = {}
    for day, key, amount in picked:
        slot = out.setdefault(day, {})
        kind = kinds.get(int(key), "usage")
        slot[kind] = slot.get(kind, Decimal(0)) + amount
    return {
        day: {kind: float(v) for kind, v in sorted(split.items())}
        for day, split in out.items()
    }


def spend_frame_read(
    scope: str, name: str, currency: str, start: date, end: date
) -> pd.DataFrame:
    """The series' daily spend as day, record_type, cost: on a billed day its
    allocated bill split by the record type of each line (those in
    ``analytics.forecast.LUMP_TYPES`` are forecast as lumps), the rest of the
    figure's cost as usage; a provisional day all usage. Each day's rows sum
    to its figure's cost, so spend to date is the figures'."""
    rows = [
        r
        for r in figures_read(scope=scope, names=[name], start=start, end=end)
        if r.currency == currency and r.cost is not None
    ]
    billed = (
        bill_by_record_type_read(scope, name, currency, start, end)
        if any(r.clock != "provisional" for r in rows)
        else {}
    )
    records: list[tuple[datetime, str, float]] = []
    for r in rows:
        day = r.period_start.replace(tzinfo=None)
        cost = float(r.cost)  # type: ignore[arg-type]
        split = billed.get(r.period_start.astimezone(UTC).date(), {})
        if r.clock == "provisional":
            split = {}
        other = {k: v for k, v in split.items() if k != "usage"}
        records.extend((day, kind, v) for kind, v in other.items())
        # One usage row every day (the forecast would interpolate a missing
        # one into spend to date): the bill's usage lines and whatever of the
        # figure is not billed yet.
        records.append((day, "usage", cost - math.fsum(other.values())))
    return pd.DataFrame.from_records(records, columns=["day", "record_type", "cost"])


def month_forecast_compute(
    *, scope: str, name: str, currency: str, today: date
) -> MonthForecast | None:
    """Month-end spend of one series from its figures before ``today``: bill
    where final, provisional where not, plus analytics.forecast's simulated
    remainder (80% interval). Budget-free (``analytics.forecast.with_budget``
    adds one)."""
    start = today.replace(day=1) - timedelta(days=70)
    days = spend_frame_read(scope, name, currency, start, today)
    if days.empty:
        return None
    as_of = days["day"].max()
    return forecast_month(days, as_of=as_of, series=f"{scope}/{name}", interval=0.8)
