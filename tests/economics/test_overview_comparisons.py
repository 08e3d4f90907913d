"""Honest comparisons on the overview (issue 24): the cards' previous period
is read whatever the window and is as long as the cards' own; presets end at
the last complete UTC day; today enters a window only on request and is then
labelled partial; every card names its basis and clock; a finished month
shows its bill, not a forecast.

The expected figures are summed here from the world's bill lines and
telemetry hours (tests/economics/world.py), never by the code under test:
a deployment's direct cost for a billed day is its own tagged lines, or its
share of the pool's line by GPU-hours of the node's 8 x 24.
"""

from __future__ import annotations

import itertools
import math
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import Sum
from django.test import Client

from costapp.economics.selectors import overview_read
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.filters import PRESETS, preset_of, preset_window, window_label
from costapp.formatting import money
from costapp.models import CostLine, DeploymentHour, UnitCostFigure
from tests.economics import world as w
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

TODAY = w.START + timedelta(w.DAYS)  # 2026-10-12: days 0..34 are over
NOW = datetime.combine(TODAY, datetime.min.time(), UTC) + timedelta(hours=12)
NODE_GPU_SECONDS = 8 * 24 * 3600.0
_users = itertools.count()


@pytest.fixture
def figures(world: w.World) -> w.World:
    unit_costs_recompute(now=NOW)
    return world


def lead() -> Client:
    client = Client()
    client.force_login(user_in(f"lead-{next(_users)}", "tech lead"))
    return client


def n_of(day: date) -> int:
    return (day - w.START).days


# The rate cards in force (world.py): a day without a bill yet is priced
# provisionally, its measured GPU-hours at the card.
CARD = {"solo": 0.944, "a": 3.776, "b": 3.776}


def gpu_seconds(name: str, at: datetime) -> float:
    hours = DeploymentHour.objects.filter(
        deployment__name=name, hour__gte=at, hour__lt=at + timedelta(days=1)
    )
    return float(hours.aggregate(t=Sum("gpu_seconds"))["t"])


def direct_cost(name: str, day: date) -> float:
    """A deployment's allocated bill for a billed day, from the bill lines;
    for a day without a bill, its GPU-hours at the rate card."""
    at = w.day_start(n_of(day))
    if n_of(day) >= w.BILLED_DAYS:
        return gpu_seconds(name, at) / 3600.0 * CARD[name]
    if name == "solo":
        lines = CostLine.objects.filter(tag_value="solo", period_start=at)
        return float(lines.aggregate(t=Sum("amortized_cost"))["t"])
    pool = CostLine.objects.filter(tag_value="p", period_start=at)
    bill = float(pool.aggregate(t=Sum("amortized_cost"))["t"])
    return bill * gpu_seconds(name, at) / NODE_GPU_SECONDS


def requests(name: str, day: date) -> float:
    at = w.day_start(n_of(day))
    hours = DeploymentHour.objects.filter(
        deployment__name=name, hour__gte=at, hour__lt=at + timedelta(days=1)
    )
    sums = hours.aggregate(s=Sum("requests_stop"), n=Sum("requests_length"))
    return float(sums["s"] or 0) + float(sums["n"] or 0)


def direct_sums(start: date, end: date, names: tuple[str, ...]) -> tuple[float, float]:
    """(spend, requests) over the complete days [start, end)."""
    days = [start + timedelta(d) for d in range((end - start).days)]
    assert all(0 <= n_of(d) < w.DAYS for d in days), "a day without figures"
    assert end <= TODAY, "today is not a complete day"
    cost = math.fsum(direct_cost(n, d) for n in names for d in days)
    count = math.fsum(requests(n, d) for n in names for d in days)
    return cost, count


NAMES = ("a", "b", "solo")
# Window ends: one whose previous days hold the credit and the zero-request
# day, one ending at the last complete day (its own days partly provisional).
ENDS = (w.START + timedelta(20), TODAY)


@pytest.mark.parametrize("end", ENDS, ids=lambda d: d.isoformat())
@pytest.mark.parametrize("days", range(1, 15))
def test_the_previous_period_is_the_direct_sum_over_as_many_days_before(
    figures: w.World, days: int, end: date
) -> None:
    data = overview_read(today=end, days=days)
    n = min(7, days)
    p = data.period
    assert (p.start, p.end, p.previous_start) == (
        end - timedelta(n),
        end,
        end - timedelta(2 * n),
    )
    # Read whatever the window: a window shorter than both periods still
    # compares against all of the days before it, never $0.00.
    cost, count = direct_sums(p.previous_start, p.start, NAMES)
    spend, per_1k, _, reqs = data.kpis
    assert spend.label == f"Spend, last {n} day{'s' if n > 1 else ''}"
    assert spend.previous == pytest.approx(cost, rel=1e-9, abs=1e-6)
    assert reqs.previous == pytest.approx(count, rel=1e-9)
    assert per_1k.previous == pytest.approx(cost / count * 1000, rel=1e-9)
    want = {
        "final" if n_of(d) < w.ESTIMATED_DAY else "estimated"
        if n_of(d) == w.ESTIMATED_DAY else "provisional"
        for d in (p.previous_start + timedelta(i) for i in range(n))
    }  # fmt: skip
    assert set(p.previous_clocks) == want
    assert p.previous_covered == n


def test_a_team_compares_its_own_deployments_days(figures: w.World) -> None:
    end = w.START + timedelta(20)
    data = overview_read(today=end, days=3, team="t2")
    cost, count = direct_sums(end - timedelta(6), end - timedelta(3), ("a",))
    assert data.kpis[0].previous == pytest.approx(cost, rel=1e-9)
    assert data.kpis[3].previous == pytest.approx(count, rel=1e-9)


def test_with_no_figure_before_the_period_the_previous_is_missing_not_zero(
    figures: w.World,
) -> None:
    data = overview_read(today=w.START + timedelta(3), days=3)
    assert math.isnan(data.kpis[0].previous) and math.isnan(data.kpis[0].change)


def test_the_table_counts_the_flags_of_its_own_days(figures: w.World) -> None:
    flagged = UnitCostFigure.objects.filter(
        scope="deployment", grain="day", name="solo"
    )
    # Flag one day outside the table's 7 days and one inside.
    flagged.filter(period_start=w.day_start(20)).update(flag="anomaly")
    flagged.filter(period_start=w.day_start(33)).update(flag="anomaly")
    rows = {s.name: s for s in overview_read(today=TODAY, days=30).deployments}
    inside = flagged.filter(
        period_start__gte=w.day_start(28), period_start__lt=w.day_start(35)
    ).exclude(flag="")
    assert rows["solo"].flags == inside.count() >= 1
    assert rows["solo"].flags < flagged.exclude(flag="").count()


# --- the pages, read as a user reads them --------------------------------------


def cards(html: str) -> dict[str, tuple[float, float]]:
    """Each KPI card's label -> (current, previous) as the page sends them."""
    found = re.findall(
        r'<div class="label">([^<]+)(?:<span[^>]*>[^<]*</span>)?</div>\s*'
        r'<div class="value" data-col="current" data-value="([^"]+)">.*?'
        r'data-col="previous" data-value="([^"]+)"',
        html,
        re.S,
    )
    return {label.strip(): (float(cur), float(prev)) for label, cur, prev in found}


def test_presets_end_at_the_last_complete_day_and_compare_complete_days(
    figures: w.World,
) -> None:
    with time_machine.travel(NOW, tick=False):
        client = lead()
        for preset in (k for k in PRESETS if k != "custom"):
            html = client.get("/", {"preset": preset}).content.decode()
            end = re.search(
                r'id="window-shown" data-start="[^"]+" data-end="([^"]+)"', html
            )
            assert end is not None, preset
            window_end = date.fromisoformat(end.group(1))
            assert window_end <= TODAY, preset  # today never in a preset
            assert "partial" not in html.split('id="kpis"')[1].split("</section>")[0]
            start = window_end - timedelta(7)
            cost, count = direct_sums(start - timedelta(7), start, NAMES)
            found = cards(html)
            assert found["Spend, last 7 days"][1] == pytest.approx(cost, rel=1e-9)
            assert found["Requests, last 7 days"][1] == pytest.approx(count, rel=1e-9)
            last = start - timedelta(1)
            assert f"the 7 days before ({start - timedelta(7)} to {last})" in html
            assert money(Decimal(repr(cost)), "USD") in html, preset


def test_the_7_day_preset_reads_as_a_week_against_the_week_before(
    figures: w.World,
) -> None:
    with time_machine.travel(NOW, tick=False):
        html = lead().get("/", {"preset": "7d"}).content.decode()
    assert "2026-10-05</strong> to <strong>2026-10-11</strong> (last 7 days)" in html
    cost, _ = direct_sums(date(2026, 9, 28), date(2026, 10, 5), NAMES)
    assert "the 7 days before (2026-09-28 to 2026-10-04)" in html
    assert money(Decimal(repr(cost)), "USD") in html
    assert "vs $0.00" not in html
    # The basis and the clocks: days 32 (estimated) and 33, 34 (no bill yet).
    basis = html.split('id="kpi-basis">')[1].split("</p>")[0]
    assert "direct: the deployments&#x27; allocated bill" in basis
    assert "clock final bill, estimated bill, provisional" in basis
    assert "the 7 days before (2026-09-28 to 2026-10-04) final bill." in basis
    assert "<h2>Deployments, last 7 days</h2>" in html
    assert "(fully loaded)</div>" in html  # the fleet's per-1k cards
    assert "Fleet: spend in October 2026 to date (fully loaded)" in html


def test_the_default_window_is_the_90_day_preset_and_says_so(figures: w.World) -> None:
    with time_machine.travel(NOW, tick=False):
        client = lead()
        default = client.get("/").content.decode()
        preset = client.get("/", {"preset": "90d"}).content.decode()
    shown = re.compile(r'<p class="window" id="window-shown".*?</p>', re.S)
    assert shown.findall(default) == shown.findall(preset)
    assert "(last 90 days)" in default
    assert '<option value="90d" selected>' in default
    assert cards(default) == cards(preset)


def test_today_enters_only_on_request_and_is_labelled_partial(
    figures: w.World,
) -> None:
    with time_machine.travel(NOW, tick=False):
        html = (
            lead()
            .get(
                "/", {"start": "2026-10-06", "end": (TODAY + timedelta(1)).isoformat()}
            )
            .content.decode()
        )
    kpis = html.split('id="kpis"')[1].split("</section>")[0]
    assert kpis.count('<span class="badge warn">partial</span>') == 4
    assert "includes today 2026-10-12: partial, not closed" in html
    assert "2026-10-12 is today: partial, not closed" in html  # the range box
    # Today has no figure yet: the cards say their days are short.
    assert "Only 6 of these 7 days have figures." in html


def test_a_finished_month_shows_its_bill_and_no_forecast(figures: w.World) -> None:
    with time_machine.travel(NOW, tick=False):
        client = Client()
        client.force_login(user_in("fin", "finance"))
        html = client.get("/economics/budgets/", {"preset": "last_month"}).content
    page = html.decode()
    september = CostLine.objects.filter(
        period_start__gte=w.day_start(0), period_start__lt=w.day_start(24)
    ).aggregate(t=Sum("amortized_cost"))["t"]
    assert september == 24 * (w.SOLO_DAY_BILL + w.POOL_DAY_BILL) + w.CREDIT
    assert "Month-end forecast" not in page
    assert "Month total" in page
    assert "Fleet spend, September 2026 to 2026-09-30 (fully loaded)" in page
    assert "through 2026-09-30" in page
    total = page.split('id="forecast-point">')[1].split("<")[0]
    assert total == money(september, "USD")


@pytest.mark.parametrize("today", [date(2026, 12, 10), date(2026, 12, 1)])
def test_every_preset_ends_at_the_last_complete_day_unless_a_page_is_live(
    today: date,
) -> None:
    for preset in (k for k in PRESETS if k != "custom"):
        start, end = preset_window(preset, today)
        assert end <= today and start < end, preset
        assert window_label(PRESETS[preset], end, today) == PRESETS[preset]
    # Month to date is the month of the last complete day: on the 1st, the
    # month just ended, never an empty or part-day window.
    assert preset_window("mtd", date(2026, 12, 1)) == (
        date(2026, 11, 1),
        date(2026, 12, 1),
    )
    # A live page (the alerts log) runs to now, and says today is partial.
    start, end = preset_window("7d", today, through_today=True)
    assert (start, end) == (today - timedelta(6), today + timedelta(1))
    assert window_label("last 7 days", end, today) == (
        f"last 7 days; {today.isoformat()} is today: partial, not closed"
    )
    assert preset_of(*preset_window("90d", today), today) == "90d"
    assert preset_of(today - timedelta(89), today, today) == "custom"
