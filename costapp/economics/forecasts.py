"""The month-end spend forecast and budget status of a series: stored
forecasts (written after each recompute) read with the budget applied, or
computed from the stored figures and the bill lines' record types when no
stored row fits. Pages and the API read budgets through here."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pandas as pd
from django.db.models import Max

from analytics.allocation import IDLE, Share
from analytics.forecast import MonthForecast, budget_burn, forecast_month
from costapp.economics.figures import budgets_read, figures_read, utc_midnight
from costapp.models import (
    Budget,
    CostLine,
    Deployment,
    MonthForecastFigure,
    UnitCostFigure,
)


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    forecast: MonthForecast | None  # None: no spend figures for the scope
    spent_share: float  # to date / budget


def _scope_member(scope: str, name: str) -> Callable[[Share], bool]:
    """Whether an allocated share is in the series' cost, as the figures
    define it (costapp.economics.frames): a deployment its direct share; a
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


def _bill_by_record_type(
    scope: str, name: str, currency: str, start: date, end: date
) -> dict[date, dict[str, float]]:
    """Per UTC day with a bill: the series' allocated bill by the record type
    of each bill line (``end`` exclusive)."""
    from costapp.costs.allocations import allocation_days
    from costapp.costs.selectors import DEFAULT_BASIS

    member = _scope_member(scope, name)
    picked: list[tuple[date, str, Decimal]] = []
    for (_, day, cur), allocation in allocation_days(start, end, DEFAULT_BASIS).items():
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


def _spend_frame(
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
        _bill_by_record_type(scope, name, currency, start, end)
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
    remainder (80% interval). Budget-free (``with_budget`` adds one)."""
    start = today.replace(day=1) - timedelta(days=70)
    days = _spend_frame(scope, name, currency, start, today)
    if days.empty:
        return None
    as_of = days["day"].max()
    return forecast_month(days, as_of=as_of, series=f"{scope}/{name}", interval=0.8)


def with_budget(forecast: MonthForecast, budget: float | None) -> MonthForecast:
    """The forecast against ``budget``: share of the point and the day the
    cumulative path reaches it, as ``forecast_month(budget=...)`` gives."""
    if budget is None:
        return replace(forecast, budget=None, budget_share=None, budget_burn_date=None)
    burn = budget_burn(forecast.path, budget)
    return replace(
        forecast,
        budget=budget,
        budget_share=forecast.point / budget,
        budget_burn_date=burn,
    )


def stored_forecast(row: MonthForecastFigure) -> MonthForecast:
    return MonthForecast(
        series=f"{row.scope}/{row.name}",
        month=pd.Timestamp(row.month),
        as_of=pd.Timestamp(row.as_of),
        to_date=row.to_date,
        remaining_days=row.remaining_days,
        point=row.point,
        lower=row.lower,
        upper=row.upper,
        interval=row.interval,
        method=row.method,
        budget=None,
        burn_rate=float("nan") if row.burn_rate is None else row.burn_rate,
        budget_burn_date=None,
        budget_share=None,
        lumps_expected=row.lumps_expected,
        path=tuple((pd.Timestamp(day), float(v)) for day, v in row.path),
    )


def latest_spend_day(
    *, scope: str, name: str, currency: str, today: date
) -> date | None:
    """The last day before ``today`` with a cost: the as-of day a forecast
    computed now would have."""
    last = UnitCostFigure.objects.filter(
        scope=scope, name=name, currency=currency, grain="day",
        period_start__lt=utc_midnight(today), cost__isnull=False,
    ).aggregate(last=Max("period_start"))["last"]  # fmt: skip
    return None if last is None else last.astimezone(UTC).date()


def month_forecast_read(
    *,
    scope: str,
    name: str,
    currency: str,
    today: date,
    budget: float | None = None,
) -> MonthForecast | None:
    """Month-end spend of one series (``month_forecast_compute``). The stored
    forecast (``MonthForecastFigure``, written by the recompute) is read when
    it is as of the day a computation now would be (the series' last day
    with a cost before ``today``); otherwise it is computed here, as before
    (0.4-0.75 s: allocation and ETS). The budget is applied at read time."""
    as_of = latest_spend_day(scope=scope, name=name, currency=currency, today=today)
    if as_of is None:
        return None
    row = MonthForecastFigure.objects.filter(
        scope=scope, name=name, currency=currency, as_of=as_of
    ).first()
    if row is not None:
        forecast: MonthForecast | None = stored_forecast(row)
    else:
        forecast = month_forecast_compute(
            scope=scope, name=name, currency=currency, today=today
        )
    return None if forecast is None else with_budget(forecast, budget)


def budget_statuses_read(*, today: date) -> list[BudgetStatus]:
    out = []
    for budget in budgets_read():
        amount = float(budget.monthly_amount)
        forecast = month_forecast_read(
            scope=budget.scope,
            name=budget.name,
            currency=budget.currency,
            today=today,
            budget=amount,
        )
        share = forecast.to_date / amount if forecast is not None else float("nan")
        out.append(BudgetStatus(budget=budget, forecast=forecast, spent_share=share))
    return out
