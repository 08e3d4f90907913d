"""The overview's month card (``economics.forecasts``): spend to date against SQL
sums over the stored figures, the stored forecast, budgets in scope, active
alerts; and the include rendered with it."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.context_processors import PermWrapper
from django.db import connection
from django.template.loader import render_to_string
from django.urls import reverse

from costapp import formatting as fmt
from costapp.economics.forecasts.present import (
    month_card_context,
    overview_month_context,
)
from costapp.economics.forecasts.selectors import (
    month_forecast_read,
    overview_month_read,
)
from costapp.economics.forecasts.services import month_forecasts_store
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import AlertRule, AlertState, Budget, UnitCostFigure
from tests.economics import world as w

pytestmark = [pytest.mark.django_db]

NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)
LAST = w.START + timedelta(days=w.DAYS - 1)  # 2026-10-11
TODAY = LAST + timedelta(days=1)
OCTOBER = date(2026, 10, 1)


def sql_month(scope: str, names: list[str]) -> tuple[Decimal | None, dict[str, int]]:
    """Cost of October to date and days per clock, summed by PostgreSQL."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT SUM(cost) FROM costapp_unitcostfigure WHERE grain = 'day' "
            "AND currency = 'USD' AND scope = %s AND name = ANY(%s) "
            "AND period_start >= %s AND period_start < %s",
            [scope, names, datetime(2026, 10, 1, tzinfo=UTC),
             datetime.combine(TODAY, datetime.min.time(), UTC)],
        )  # fmt: skip
        (total,) = cur.fetchone()
        cur.execute(
            "SELECT clock, COUNT(DISTINCT period_start) FROM costapp_unitcostfigure "
            "WHERE grain = 'day' AND currency = 'USD' AND scope = %s "
            "AND name = ANY(%s) AND cost IS NOT NULL AND period_start >= %s "
            "AND period_start < %s GROUP BY clock",
            [scope, names, datetime(2026, 10, 1, tzinfo=UTC),
             datetime.combine(TODAY, datetime.min.time(), UTC)],
        )  # fmt: skip
        clocks = dict(cur.fetchall())
    return total, clocks


@pytest.fixture
def month(world: w.World) -> None:
    Budget.objects.create(scope="fleet", name="fleet", monthly_amount=9000)
    Budget.objects.create(scope="team", name="t2", monthly_amount=5000)
    Budget.objects.create(scope="deployment", name="solo", monthly_amount=100)
    unit_costs_recompute(now=NOW)
    month_forecasts_store(now=NOW)
    rule = AlertRule.objects.create(
        name="unit cost up", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    AlertState.objects.create(rule=rule, scope_name="a", state="firing")
    AlertState.objects.create(rule=rule, scope_name="solo", state="pending")
    AlertState.objects.create(rule=rule, scope_name="b", state="inactive")


def test_the_fleet_card_sums_the_stored_figures_and_reads_the_stored_forecast(
    month: None,
) -> None:
    card = overview_month_read(today=TODAY)
    total, clocks = sql_month("fleet", ["fleet"])
    assert total is not None
    assert (card.scope, card.name, card.month, card.as_of) == (
        "fleet", "fleet", OCTOBER, LAST,
    )  # fmt: skip
    assert card.to_date == total
    assert card.clocks == clocks
    # The world's October: billed (final), the 9th estimated, 10th-11th provisional.
    assert clocks == {"final": 8, "estimated": 1, "provisional": 2}
    assert card.missing_days == 0
    expected = month_forecast_read(scope="fleet", name="fleet", currency="USD",
                                   today=TODAY)  # fmt: skip
    assert card.forecast is not None and expected is not None
    assert asdict(card.forecast) == asdict(expected)
    assert card.forecast.lower <= card.forecast.point <= card.forecast.upper
    assert card.forecast.interval == 0.8
    assert {(s.budget.scope, s.budget.name) for s in card.budgets} == {
        ("fleet", "fleet"), ("team", "t2"), ("deployment", "solo"),
    }  # fmt: skip
    assert card.active_alerts == 2  # pending and firing; inactive is not active


def test_a_team_card_is_the_team_series_its_budgets_and_its_alerts(
    month: None,
) -> None:
    card = overview_month_read(today=TODAY, team="t2", deployments=["a"])
    total, _ = sql_month("team", ["t2"])
    assert (card.scope, card.name) == ("team", "t2")
    assert card.to_date == total
    assert card.forecast is not None
    stored = month_forecast_read(scope="team", name="t2", currency="USD", today=TODAY)
    assert stored is not None and card.forecast.point == stored.point
    assert [(s.budget.scope, s.budget.name) for s in card.budgets] == [("team", "t2")]
    assert card.active_alerts == 1  # "a" firing


def test_a_hand_picked_set_sums_its_deployments_and_has_no_forecast(
    month: None,
) -> None:
    card = overview_month_read(today=TODAY, deployments=["a", "solo"])
    total, _ = sql_month("deployment", ["a", "solo"])
    assert card.scope == "" and card.forecast is None and card.note
    assert card.to_date == total
    assert [(s.budget.scope, s.budget.name) for s in card.budgets] == [
        ("deployment", "solo")
    ]
    assert card.active_alerts == 2


def test_a_day_without_a_cost_is_counted_missing_not_zero(month: None) -> None:
    UnitCostFigure.objects.filter(
        scope="team", name="t1", grain="day", period_start=w.day_start(w.DAYS - 3)
    ).update(cost=None)
    card = overview_month_read(today=TODAY, team="t1", deployments=["solo"])
    total, clocks = sql_month("team", ["t1"])
    assert card.to_date == total
    assert card.missing_days == 1
    assert sum(card.clocks.values()) == sum(clocks.values()) == 10


def test_a_month_without_figures_shows_missing_never_zero(world: w.World) -> None:
    card = overview_month_read(today=TODAY)
    assert card.to_date is None and card.forecast is None and card.as_of is None
    ctx = month_card_context(card)
    assert ctx["to_date"] == ctx["point"] == ctx["interval"] == fmt.MISSING
    assert "$0.00" not in render(ctx, superuser=True)


def render(ctx: dict[str, object], *, superuser: bool) -> str:
    user = get_user_model().objects.create_user(
        username=f"u{superuser}", is_superuser=superuser
    )
    return render_to_string(
        "economics/_month_card.html",
        {"month_card": ctx, "perms": PermWrapper(user)},
    )


def test_the_include_prints_the_selectors_figures_with_their_currency(
    month: None,
) -> None:
    card = overview_month_read(today=TODAY)
    assert card.forecast is not None and card.to_date is not None
    html = render(overview_month_context(today=TODAY)["month_card"], superuser=True)
    assert fmt.money(card.to_date, "USD") in html
    assert fmt.money(card.forecast.point, "USD") in html
    interval = (
        f"{fmt.money(card.forecast.lower, 'USD')} \N{EN DASH} "
        f"{fmt.money(card.forecast.upper, 'USD')}"
    )
    assert interval in html and "80% interval" in html
    assert "final bill 8 days, estimated bill 1 day, provisional 2 days" in html
    assert f'data-value="{card.to_date}"' in html
    assert 'data-col="active_alerts">2<' in html
    for s in card.budgets:
        assert s.forecast is not None and s.forecast.budget_share is not None
        word = "over" if s.forecast.budget_share > 1 else "under"
        assert f"{word}: {fmt.percent(s.forecast.budget_share)}" in html
        assert fmt.money(s.budget.monthly_amount, "USD") in html
    assert reverse("economics:budgets") in html
    assert reverse("alerts:log") in html


def test_the_include_links_only_where_the_user_may_go(month: None) -> None:
    html = render(overview_month_context(today=TODAY)["month_card"], superuser=False)
    assert reverse("economics:budgets") not in html
    assert reverse("alerts:log") not in html


def test_a_hand_picked_set_renders_the_missing_mark_for_its_forecast(
    month: None,
) -> None:
    ctx = overview_month_context(today=TODAY, deployments=["a", "solo"])["month_card"]
    html = render(ctx, superuser=True)
    assert f'data-col="forecast" data-value="">{fmt.MISSING}<' in html
    assert "no forecast for a hand-picked set" in html


def test_the_overview_card_runs_through_the_windows_last_day_from_the_store(
    month: None, client: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default window ends today (exclusive): the card is as of its last
    day, as the budgets page is, and reads the forecast the recompute
    stored. Passing the last day as the exclusive "today" once made it a day
    short and recomputed the forecast on every request (0.4 s)."""
    import time_machine

    def compute(**_: object) -> None:
        raise AssertionError("the stored forecast was not used")

    monkeypatch.setattr(
        "costapp.economics.forecasts.selectors.month_forecast_compute", compute
    )
    user = get_user_model().objects.create_superuser("boss")
    client.force_login(user)  # type: ignore[attr-defined]
    with time_machine.travel(datetime.combine(TODAY, datetime.min.time(), UTC)
                             + timedelta(hours=9), tick=False):  # fmt: skip
        page = client.get(reverse("overview")).content.decode()  # type: ignore[attr-defined]
    assert f"through {LAST:%Y-%m-%d}" in page or f"through {LAST}" in page, page


def test_a_month_with_no_day_left_shows_its_total_not_a_forecast(
    month: None,
) -> None:
    """On the 1st the month shown is the one just ended: an 80% interval of
    one value and a method of "none" said nothing."""
    from dataclasses import replace

    card = overview_month_read(today=TODAY)
    assert card.forecast is not None
    running = month_card_context(card)
    assert running["forecast_label"] == "Month-end forecast" and not running["note"]
    over = replace(card, forecast=replace(card.forecast, remaining_days=0))
    shown = month_card_context(over)
    assert shown["forecast_label"] == "Month total"
    assert shown["note"] == "the month is over: nothing left to forecast"
    html = render_to_string("economics/_month_card.html", {"month_card": shown})
    assert "Month total" in html and "interval" not in html
    assert f"spend in {shown['month']} (fully loaded)</div>" in html  # not "to date"
