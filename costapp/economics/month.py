"""The month so far and its end: the stored month forecasts (written at the end
of the recompute) and the overview's month card.

``month_forecasts_store`` simulates once per series and month, so pages read
``MonthForecastFigure`` rows instead of running ETS per request; a budget is
applied at read time (``forecasts.with_budget``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q, Sum

from analytics.forecast import MonthForecast
from costapp import formatting as fmt
from costapp.economics.figures import utc_midnight
from costapp.economics.forecasts import (
    BudgetStatus,
    budget_statuses_read,
    month_forecast_compute,
    month_forecast_read,
)
from costapp.models import (
    AlertState,
    Budget,
    Deployment,
    MonthForecastFigure,
    UnitCostFigure,
)
from costapp.models.economics import FLEET

# --- stored forecasts --------------------------------------------------------------


def latest_data_day() -> date | None:
    """The last closed UTC day any series has a cost for: the stored
    forecasts' as-of. The day in progress is not spend to date (it would be
    taken for a whole day), and the pages read spend before today."""
    last = UnitCostFigure.objects.filter(
        grain="day", cost__isnull=False, complete=True
    ).aggregate(last=Max("period_start"))["last"]
    return None if last is None else last.astimezone(UTC).date()


def forecast_series() -> list[tuple[str, str, str]]:
    """(scope, name, currency) of the fleet, every team and every budget."""
    found = set(
        UnitCostFigure.objects.filter(grain="day", scope__in=["fleet", "team"])
        .values_list("scope", "name", "currency")
        .distinct()
    )
    found |= set(Budget.objects.values_list("scope", "name", "currency"))
    return sorted(found)


def month_forecasts_store(*, now: datetime, since: date | None = None) -> int:
    """Store the month forecast of every series in ``forecast_series`` as of
    the latest closed data day, replacing its rows for that month; returns
    the number written. A series without spend keeps no row for the month.

    ``since``: the first day the data changed. A change after the as-of day
    (the refresh of the day in progress, every quarter of an hour) changes
    no forecast already stored for that day: nothing is redone."""
    last = latest_data_day()
    if last is None:
        return 0
    if (
        since is not None
        and since > last
        and MonthForecastFigure.objects.filter(as_of=last).exists()
    ):
        return 0
    today = last + timedelta(days=1)
    rows: list[MonthForecastFigure] = []
    keys = forecast_series()
    for scope, name, currency in keys:
        f = month_forecast_compute(
            scope=scope, name=name, currency=currency, today=today
        )
        if f is not None:
            rows.append(forecast_row(scope, name, currency, f, now))
    with transaction.atomic():
        doomed = Q(pk__in=[])
        for scope, name, currency in keys:
            doomed |= Q(
                scope=scope, name=name, currency=currency, month=last.replace(day=1)
            )
        for r in rows:  # a series whose last day is in an earlier month
            doomed |= Q(scope=r.scope, name=r.name, currency=r.currency, month=r.month)
        MonthForecastFigure.objects.filter(doomed).delete()
        MonthForecastFigure.objects.bulk_create(rows)
    return len(rows)


def forecast_row(
    scope: str, name: str, currency: str, f: MonthForecast, now: datetime
) -> MonthForecastFigure:
    return MonthForecastFigure(
        scope=scope,
        name=name,
        currency=currency,
        month=f.month.date(),
        as_of=f.as_of.date(),
        to_date=f.to_date,
        remaining_days=f.remaining_days,
        point=f.point,
        lower=f.lower,
        upper=f.upper,
        interval=f.interval,
        burn_rate=None if math.isnan(f.burn_rate) else f.burn_rate,
        method=f.method,
        lumps_expected=f.lumps_expected,
        path=[[day.date().isoformat(), v] for day, v in f.path],
        computed_at=now,
    )


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


def _month_deployments(
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
    scope, name, names = _month_deployments(team, deployments)
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


CLOCK_LABELS = {"final": "final bill", "estimated": "estimated bill",
                "provisional": "provisional"}  # fmt: skip


def month_card_context(card: MonthCard) -> dict[str, Any]:
    """The card as strings for ``economics/_month_card.html``."""
    cur, f = card.currency, card.forecast
    complete = f is not None and f.remaining_days == 0
    budgets = []
    for s in card.budgets:
        b, bf = s.budget, s.forecast
        burn = bf.budget_burn_date if bf is not None else None
        budgets.append(
            {
                "scope": b.scope,
                "name": b.name,
                "amount": fmt.money(b.monthly_amount, b.currency),
                "to_date": fmt.money(bf.to_date, b.currency) if bf else fmt.MISSING,
                "point": fmt.money(bf.point, b.currency) if bf else fmt.MISSING,
                "share": fmt.percent(bf.budget_share) if bf else fmt.MISSING,
                "over": bool(
                    bf and bf.budget_share is not None and bf.budget_share > 1
                ),
                "runs_out": burn.strftime("%Y-%m-%d")
                if burn is not None
                else ("not this month" if bf else fmt.MISSING),
            }
        )
    return {
        "title": "Fleet" if card.scope == "fleet" else card.name or "Selection",
        "month": card.month.strftime("%B %Y"),
        "as_of": card.as_of.isoformat() if card.as_of else fmt.MISSING,
        "to_date": fmt.money(card.to_date, cur),
        "to_date_raw": "" if card.to_date is None else str(card.to_date),
        "clocks": ", ".join(
            f"{CLOCK_LABELS.get(c, c)} {n} day{'s' if n != 1 else ''}"
            for c, n in sorted(
                card.clocks.items(), key=lambda item: list(CLOCK_LABELS).index(item[0])
            )
        ),
        "missing_days": card.missing_days,
        "point": fmt.money(f.point, cur) if f else fmt.MISSING,
        "point_raw": repr(f.point) if f else "",
        "interval": (
            f"{fmt.money(f.lower, cur)} \N{EN DASH} {fmt.money(f.upper, cur)}"
            if f
            else fmt.MISSING
        ),
        "interval_pct": f"{f.interval:.0%}" if f else "",
        "method": f.method if f else "",
        # A month with no day left has a total, not a forecast: an interval
        # of one value and a method "none" said nothing.
        "complete": complete,
        "forecast_label": "Month total" if complete else "Month-end forecast",
        "note": card.note
        or ("the month is over: nothing left to forecast" if complete else ""),
        "budgets": budgets,
        "active_alerts": card.active_alerts,
    }


def overview_month_context(
    *, today: date, team: str | None = None, deployments: Iterable[str] | None = None
) -> dict[str, Any]:
    """The one call the overview makes: ``month_card`` for the include."""
    card = overview_month_read(today=today, team=team, deployments=deployments)
    return {"month_card": month_card_context(card)}
