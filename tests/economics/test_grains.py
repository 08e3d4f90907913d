"""Week and month figures: day figures summed (the bill clock), unit costs as
ratios of the sums, the baseline as the ratio of the days' summed baseline
parts; and the band of $ per 1M tokens. Expectations by hand from world.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import UnitCostFigure
from tests.economics import world as w

pytestmark = [pytest.mark.django_db]

NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)


def figure(grain: str, start: datetime, name: str = "solo") -> UnitCostFigure:
    return UnitCostFigure.objects.get(
        scope="deployment", name=name, grain=grain, period_start=start
    )


def requests(days: range) -> float:
    return sum(24 * w.requests_per_hour("solo", n) for n in days)


def test_a_week_sums_its_days_and_sits_on_the_sum_of_their_baselines(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    week = figure("week", w.day_start(21))  # a Monday, days 21-27, all final
    # 7 days x $19.20; 100 requests an hour, weekends at 0.6x: 2400 x 6.2.
    assert week.cost == Decimal("134.400000000000")
    assert week.requests == pytest.approx(14880.0, rel=1e-12)
    assert week.cost_per_1k_requests == pytest.approx(134.4 / 14880 * 1000, rel=1e-12)
    assert week.cost_per_1m_tokens == pytest.approx(134.4 / (14880 * 1200) * 1e6)
    assert week.gpu_hours == pytest.approx(168.0)
    assert week.cost_per_gpu_hour == pytest.approx(0.80, rel=1e-12)
    assert (week.clock, week.rate_source, week.note) == ("final", "bill", "")
    # Noiseless and past warm-up: each day's baseline parts are its own
    # parts, so the week's baseline is its unit cost. Weeks have no band.
    assert week.baseline == pytest.approx(week.cost_per_1k_requests, rel=1e-9)
    assert week.baseline_per_1m_tokens == pytest.approx(week.cost_per_1m_tokens)
    assert (week.lower, week.upper, week.flag) == (None, None, "")
    # The first week has no baseline: no slot had seen a day before it.
    assert figure("week", w.day_start(0)).baseline is None


def test_a_month_holds_its_credit_and_its_zero_request_day_and_says_it_is_partial(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    september = figure("month", datetime(2026, 9, 1, tzinfo=UTC))
    # Days 0-23 are 7-30 September: 24 x $19.20 and the $30 credit of day 12.
    assert september.cost == Decimal("430.800000000000")
    assert september.requests == pytest.approx(requests(range(24)), rel=1e-12)
    assert september.cost_per_1k_requests == pytest.approx(
        430.8 / requests(range(24)) * 1000, rel=1e-12
    )
    assert september.clock == "final"
    assert september.note == "partial: 24 of 30 days"
    october = figure("month", datetime(2026, 10, 1, tzinfo=UTC))
    # Days 24-34: 1-11 October; day 32 estimated, 33-34 provisional at the
    # rate learnt from the bill ($0.80 per GPU-hour): the month is provisional.
    assert october.clock == "provisional"
    assert october.rate_source == "mixed"
    assert float(october.cost) == pytest.approx(11 * 19.2, rel=1e-9)
    assert october.note == "partial: 11 of 31 days"


def test_week_and_month_rows_equal_sums_of_the_stored_days_for_every_series(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    weeks = UnitCostFigure.objects.filter(grain="week")
    assert weeks.count() > 0
    for wk in weeks:
        days = UnitCostFigure.objects.filter(
            grain="day", scope=wk.scope, name=wk.name, currency=wk.currency,
            period_start__gte=wk.period_start,
            period_start__lt=wk.period_start + timedelta(days=7),
        )  # fmt: skip
        costs = [d.cost for d in days]
        expected = None if None in costs else sum(costs, Decimal(0))
        if expected is None:
            assert wk.cost is None, (wk.scope, wk.name, wk.period_start)
        else:
            assert float(wk.cost) == pytest.approx(float(expected), abs=1e-9)
        assert wk.requests == pytest.approx(sum(d.requests for d in days))


def test_the_per_token_band_comes_from_the_same_state_and_holds_a_steady_day(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    steady = figure("day", w.day_start(22))
    assert steady.lower_per_1m_tokens < steady.cost_per_1m_tokens
    assert steady.cost_per_1m_tokens < steady.upper_per_1m_tokens
    # Noiseless: sigma is its floor (6%), the band baseline x exp(+-2.5 x 0.06).
    assert steady.upper_per_1m_tokens == pytest.approx(
        steady.baseline_per_1m_tokens * 1.1618342427282831, rel=1e-9
    )
    assert steady.lower_per_1m_tokens == pytest.approx(
        steady.baseline_per_1m_tokens / 1.1618342427282831, rel=1e-9
    )


def _plotted(html: str, script_id: str) -> dict:
    import json
    import re

    found = re.search(
        rf'<script id="{script_id}" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, script_id
    return json.loads(found.group(1))


def test_the_overview_and_the_deployment_page_show_the_grain_picked(
    world: w.World,
) -> None:
    import time_machine
    from django.test import Client

    from tests.support.users import user_in

    unit_costs_recompute(now=NOW)
    client = Client()
    client.force_login(user_in("lead-grains", "tech lead"))
    today = w.day_start(w.DAYS)
    with time_machine.travel(today + timedelta(hours=9), tick=False):
        page = client.get(
            "/", {"grain": "week", "start": "2026-09-07"}
        ).content.decode()
        fleet = _plotted(page, "fleet-figures")
        weeks = next(t for t in fleet["fleet-USD"]["data"] if t["name"] == "actual")
        stored = UnitCostFigure.objects.filter(
            scope="fleet", grain="week", period_start__gte=w.day_start(0),
            period_start__lt=today,
        ).order_by("period_start")  # fmt: skip
        assert len(weeks["x"]) == stored.count() == 5
        assert weeks["y"] == pytest.approx([f.cost_per_1k_requests for f in stored])
        # The $/1M tokens band beside it, from the same figures.
        tokens = next(
            t for t in fleet["fleet-USD-tokens"]["data"] if t["name"] == "actual"
        )
        assert tokens["y"] == pytest.approx([f.cost_per_1m_tokens for f in stored])
        solo = client.get("/fleet/solo/", {"grain": "month"}).content.decode()
        # October is in progress on the 13th: the page says so.
        assert "Last month (2026-10 · partial, not closed)" in solo
        refused = client.get("/fleet/solo/", {"grain": "year"}).content.decode()
        assert (
            "grain=&#x27;year&#x27;: is not one of day, week, month; showing days"
            in refused
        )
