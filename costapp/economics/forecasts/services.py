"""``month_forecasts_store``: the month forecast of every series the pages
show, simulated once per series and month at the end of the recompute and
stored (``MonthForecastFigure``); a budget is applied at read time
(``analytics.forecast.with_budget``)."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta

from django.db import transaction
from django.db.models import Q

from analytics.forecast import MonthForecast
from costapp.economics.forecasts.compute import month_forecast_compute
from costapp.economics.forecasts.selectors import (
    forecast_series_read,
    latest_data_day_read,
)
from costapp.models import MonthForecastFigure


def month_forecasts_store(*, now: datetime, since: date | None = None) -> int:
    """Store the month forecast of every series in ``forecast_series_read`` as
    of the latest closed data day, replacing its rows for that month; returns
    the number written. A series without spend keeps no row for the month.

    ``since``: the first day the data changed. A change after the as-of day
    (the refresh of the day in progress, every quarter of an hour) changes
    no forecast already stored for that day: nothing is redone."""
    last = latest_data_day_read()
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
    keys = forecast_series_read()
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
