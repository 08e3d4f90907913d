"""Stored month forecasts (``MonthForecastFigure``): written by the recompute,
read by the budgets pages, equal to the forecast computed on the fly; a
budget is applied at read time."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest

from analytics.forecast import forecast_month, with_budget
from costapp.economics.budgets import budget_upsert
from costapp.economics.forecasts import selectors as forecast_selectors
from costapp.economics.forecasts.compute import month_forecast_compute, spend_frame_read
from costapp.economics.forecasts.selectors import (
    budget_statuses_read,
    month_forecast_read,
)
from costapp.economics.forecasts.services import month_forecasts_store
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import Budget, MonthForecastFigure
from tests.economics import world as w

pytestmark = [pytest.mark.django_db]

NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)
LAST = w.START + timedelta(days=w.DAYS - 1)  # 2026-10-11, provisional
TODAY = LAST + timedelta(days=1)


def recompute(*, now: datetime, since: date | None = None) -> None:
    """The pipeline's unit costs step, then its forecasts step."""
    unit_costs_recompute(now=now, since=since)
    month_forecasts_store(now=now)


def no_compute(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record (and refuse) any forecast computed on the fly."""
    calls: list[tuple[str, str]] = []

    def refuse(*, scope: str, name: str, **_: Any) -> None:
        calls.append((scope, name))
        raise AssertionError(f"computed {scope}/{name} on the fly")

    monkeypatch.setattr(forecast_selectors, "month_forecast_compute", refuse)
    return calls


def stored_keys() -> set[tuple[str, str, str, date]]:
    return set(
        MonthForecastFigure.objects.values_list("scope", "name", "currency", "month")
    )


def test_the_forecasts_step_stores_the_fleet_every_team_and_every_budgeted_scope(
    world: w.World,
) -> None:
    Budget.objects.create(scope="deployment", name="solo", monthly_amount=500)
    recompute(now=NOW)
    october = date(2026, 10, 1)
    assert stored_keys() == {
        ("fleet", "fleet", "USD", october),
        ("team", "t1", "USD", october),
        ("team", "t2", "USD", october),
        ("team", "t3", "USD", october),
        ("deployment", "solo", "USD", october),
    }
    assert set(MonthForecastFigure.objects.values_list("as_of", flat=True)) == {LAST}
    assert set(MonthForecastFigure.objects.values_list("computed_at", flat=True)) == {
        NOW
    }


@pytest.mark.parametrize(
    ("scope", "name", "budget"),
    [
        ("fleet", "fleet", 9000.0),  # runs out this month
        ("fleet", "fleet", None),
        ("team", "t2", 1e6),  # never this month
        ("team", "t1", 120.0),  # already spent by the 11th
        ("deployment", "solo", 500.0),
    ],
)
def test_the_stored_forecast_equals_the_one_computed_on_the_fly(
    world: w.World,
    monkeypatch: pytest.MonkeyPatch,
    scope: str,
    name: str,
    budget: float | None,
) -> None:
    Budget.objects.create(scope="deployment", name="solo", monthly_amount=500)
    recompute(now=NOW)
    computed = month_forecast_compute(
        scope=scope, name=name, currency="USD", today=TODAY
    )
    assert computed is not None
    # What forecast_month itself says with the budget, from the same spend.
    start = TODAY.replace(day=1) - timedelta(days=70)
    direct = forecast_month(
        spend_frame_read(scope, name, "USD", start, TODAY),
        as_of=pd.Timestamp(LAST),
        series=f"{scope}/{name}",
        budget=budget,
        interval=0.8,
    )
    no_compute(monkeypatch)
    stored = month_forecast_read(
        scope=scope, name=name, currency="USD", today=TODAY, budget=budget
    )
    assert stored is not None
    assert asdict(stored) == asdict(with_budget(computed, budget))
    assert asdict(stored) == asdict(direct)
    if budget == 9000.0:
        assert stored.budget_burn_date is not None
        assert stored.budget_burn_date > pd.Timestamp(LAST)
    if budget == 120.0:
        assert stored.budget_burn_date is not None
        assert stored.budget_burn_date <= pd.Timestamp(LAST)
    if budget == 1e6:
        assert stored.budget_burn_date is None


def test_a_budget_edit_changes_the_share_and_burn_date_without_a_recompute(
    world: w.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget_upsert(scope="fleet", name="fleet", monthly_amount=Decimal("1000000"))
    recompute(now=NOW)
    row = MonthForecastFigure.objects.get(scope="fleet")
    [before] = budget_statuses_read(today=TODAY)
    assert before.forecast is not None and before.forecast.budget_burn_date is None

    calls = no_compute(monkeypatch)
    budget_upsert(scope="fleet", name="fleet", monthly_amount=Decimal("9000"))
    [after] = budget_statuses_read(today=TODAY)
    assert calls == []
    assert MonthForecastFigure.objects.get(scope="fleet").computed_at == row.computed_at
    assert after.forecast is not None
    assert after.forecast.budget_share == pytest.approx(row.point / 9000, rel=1e-12)
    assert after.spent_share == pytest.approx(row.to_date / 9000, rel=1e-12)
    # The burn date is the first day the stored cumulative path reaches 9000.
    first = next(day for day, spent in row.path if spent >= 9000)
    assert after.forecast.budget_burn_date == pd.Timestamp(first)


def test_a_recompute_replaces_the_rows_of_the_month(world: w.World) -> None:
    recompute(now=NOW)
    first = {r.pk for r in MonthForecastFigure.objects.all()}
    later = NOW + timedelta(hours=3)
    recompute(now=later, since=LAST - timedelta(days=2))
    rows = list(MonthForecastFigure.objects.all())
    assert len(rows) == len(first) == 4
    assert {r.pk for r in rows}.isdisjoint(first)
    assert {r.computed_at for r in rows} == {later}


def test_a_read_for_an_earlier_day_computes_as_before(
    world: w.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    recompute(now=NOW)
    earlier = LAST  # spend to date through the 10th: not the stored as-of
    expected = month_forecast_compute(
        scope="fleet", name="fleet", currency="USD", today=earlier
    )
    calls = no_compute(monkeypatch)
    with pytest.raises(AssertionError, match="computed fleet/fleet"):
        month_forecast_read(scope="fleet", name="fleet", currency="USD", today=earlier)
    assert calls == [("fleet", "fleet")]
    monkeypatch.undo()
    got = month_forecast_read(
        scope="fleet", name="fleet", currency="USD", today=earlier
    )
    assert expected is not None and got is not None
    assert asdict(got) == asdict(expected)
    assert got.as_of == pd.Timestamp(LAST - timedelta(days=1))
