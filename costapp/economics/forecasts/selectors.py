"""Reads of the month-end forecasts the pages and the API share: a series'
forecast with its budget applied (the stored one when it is as of the day a
computation now would be, else computed), the budgets' statuses and the
overview's month card."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import Decimal

import pandas as pd
from django.db.models import Count, Max, Q, Sum

from analytics.forecast import MonthForecast, with_budget
from costapp.days import utc_midnight
from costapp.economics.figures import budgets_read
from costapp.economics.forecasts.compute import month_forecast_compute
from costapp.models import (
    AlertState,
    Budget,
    Deployment,
    MonthForecastFigure,
    UnitCostFigure,
)
from costapp.models.economics import FLEET

# --- one series --------------------------------------------------------------------


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


def latest_spend_day_read(
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
    as_of = latest_spend_day_read(
        scope=scope, name=name, currency=currency, today=today
    )
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


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    forecast: MonthForecast | None  # None: no spend figures for the scope
    spent_share: float  # to date / budget


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


# --- what the store forecasts ------------------------------------------------------


def latest_data_day_read() -> date | None:
    """The last closed UTC day any series has a cost for: the stored
    forecasts' as-of. The day in progress is not spend to date (it would be
    taken for a whole day), and the pages read spend before today."""
    last = UnitCostFigure.objects.filter(
        grain="day", cost__isnull=False, complete=True
    ).aggregate(last=Max("period_start"))["last"]
    return None if last is None else last.astimezone(UTC).date()


def forecast_series_read() -> list[tuple[str, str, str]]:
    """(scope, name, currency) of the fleet, every team and every budget."""
    found = set(
        UnitCostFigure.objects.filter(grain="day", scope__in=["fleet", "team"])
        .values_list("scope", "name", "currency")
        .distinct()
    )
    found |= set(Budget.objects.values_list("scope", "name", "currency"))
    return sorted(found)


# --- the overview's month card -----------------------------------------------------


@dataclass(frozen=True)
class MonthCard:
    scope: str  # the series forecast: fleet, team or deployment ("" for a set)
    name: str
    currency: str
    month: date
    as_of: date | None  # the last day with a cost; None: none this month
    to_date: Decimal | None  # the stored figures' cost summed; None: no figure
    clocks: dict[str, int]  # days of the month to date per clock
    missing_days: int  # days to as_of without a cost (not counted, not 0)
    forecast: MonthForecast | None
    note: str  # why there is no forecast
    budgets: list[BudgetStatus]
    active_alerts: int


def _month_series_read(
    team: str | None, deployments: Iterable[str] | None
) -> tuple[str, str, list[str] | None]:
    """The series the card forecasts: the fleet, the team (its deployments all
    in scope), one deployment, or ("", "") for a hand-picked set."""
    if deployments is None:
        return "fleet", FLEET, None
    names = sorted(deployments)
    if team:
        mine = set(Deployment.objects.filter(team=team).values_list("name", flat=True))
        if mine == set(names):
            return "team", team, names
    if len(names) == 1:
        return "deployment", names[0], names
    return "", "", names


def overview_month_read(
    *,
    today: date,
    team: str | None = None,
    deployments: Iterable[str] | None = None,
    currency: str = "USD",
) -> MonthCard:
    """Month-to-date spend (bill where final, provisional where not) of the
    scope, its month-end forecast and 80% interval, the budgets in scope and
    the number of alerts pending or firing (``AlertState.ACTIVE``, as the alerts pages and the API count them) on it.
    ``deployments`` None is the whole fleet; the month is the one holding the
    last day with a cost before ``today``."""
    scope, name, names = _month_series_read(team, deployments)
    figures = UnitCostFigure.objects.filter(
        grain="day", currency=currency, period_start__lt=utc_midnight(today)
    )
    if scope:
        figures = figures.filter(scope=scope, name=name)
    else:
        figures = figures.filter(scope="deployment", name__in=names or [])
    last = figures.filter(cost__isnull=False).aggregate(last=Max("period_start"))[
        "last"
    ]
    as_of = None if last is None else last.astimezone(UTC).date()
    month = (as_of or today - timedelta(days=1)).replace(day=1)
    in_month = figures.filter(period_start__gte=utc_midnight(month))
    if as_of is not None:
        in_month = in_month.filter(period_start__lte=utc_midnight(as_of))
    sums = in_month.aggregate(
        spent=Sum("cost"),
        missing=Count("pk", filter=Q(cost__isnull=True)),
        days=Count("period_start", distinct=True),
        costed=Count("period_start", distinct=True, filter=Q(cost__isnull=False)),
    )
    clocks = {
        row["clock"]: row["n"]
        for row in in_month.filter(cost__isnull=False)
        .values("clock")
        .annotate(n=Count("period_start", distinct=True))
        .order_by("clock")
    }
    elapsed = (as_of - month).days + 1 if as_of is not None else 0
    missing = max(0, elapsed - sums["costed"]) if scope else sums["missing"]

    forecast = None
    note = ""
    if not scope:
        note = "no forecast for a hand-picked set: pick one deployment or a team"
    elif as_of is None:
        note = "no spend figures this month"
    else:
        forecast = month_forecast_read(
            scope=scope, name=name, currency=currency, today=today
        )
    budgets = [
        s
        for s in budget_statuses_read(today=today)
        if names is None
        or (s.budget.scope == "team" and s.budget.name == team)
        or (s.budget.scope == "deployment" and s.budget.name in names)
    ]
    alerts = AlertState.objects.filter(state__in=AlertState.ACTIVE)
    if names is not None:
        alerts = alerts.filter(scope_name__in=[*names, *([team] if team else [])])
    return MonthCard(
        scope=scope,
        name=name,
        currency=currency,
        month=month,
        as_of=as_of,
        to_date=sums["spent"],
        clocks=clocks,
        missing_days=missing,
        forecast=forecast,
        note=note,
        budgets=budgets,
        active_alerts=alerts.count(),
    )
