"""The month-end forecast reads the record type of each bill line behind a
series' billed days (credits, refunds, taxes and fees are lumps), and its
spend to date stays the figures' own."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import pytest

from analytics.forecast import forecast_month
from costapp.economics.figures import figures_read
from costapp.economics.forecasts.compute import (
    bill_by_record_type_read,
    spend_frame_read,
)
from costapp.economics.forecasts.selectors import month_forecast_read
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import CostLine, UnitCostFigure
from tests.economics import world as w
from tests.support.demo_data import demo_for_module

pytestmark = [pytest.mark.django_db]

NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)
WORLD_SERIES = (
    ("fleet", "fleet"), ("team", "t1"), ("team", "t2"), ("team", "t3"),
    ("deployment", "solo"), ("deployment", "a"), ("deployment", "b"), ("pool", "p"),
)  # fmt: skip


def figure_costs(scope: str, name: str, start: date, end: date) -> dict[date, float]:
    return {
        r.period_start.date(): float(r.cost)
        for r in figures_read(scope=scope, names=[name], start=start, end=end)
        if r.cost is not None and r.currency == "USD"
    }


def assert_bill_is_the_figure_on_billed_days(
    scope: str, name: str, start: date, end: date
) -> None:
    """The shares picked for the series are its figure's cost, day by day:
    the split reads the series as the figures define it (no residual)."""
    bill = bill_by_record_type_read(scope, name, "USD", start, end)
    billed = [
        r
        for r in figures_read(scope=scope, names=[name], start=start, end=end)
        if r.clock != "provisional" and r.cost is not None
    ]
    assert billed
    for r in billed:
        split = bill[r.period_start.date()]
        assert math.fsum(split.values()) == pytest.approx(
            float(r.cost), rel=1e-9, abs=1e-6
        ), (scope, name, r.period_start)


def frame_days(frame: pd.DataFrame) -> dict[date, float]:
    sums = frame.groupby("day")["cost"].apply(math.fsum)
    return {pd.Timestamp(k).date(): float(v) for k, v in sums.items()}


def rows_of(frame: pd.DataFrame, kind: str) -> dict[date, float]:
    return frame_days(frame[frame["record_type"] == kind])


@pytest.mark.parametrize(("scope", "name"), WORLD_SERIES)
def test_each_day_of_the_split_sums_to_its_figure_so_spend_to_date_is_unchanged(
    world: w.World, scope: str, name: str
) -> None:
    unit_costs_recompute(now=NOW)
    start, end = w.START, w.START + timedelta(days=w.DAYS)
    figures = figure_costs(scope, name, start, end)
    frame = spend_frame_read(scope, name, "USD", start, end)
    split = frame_days(frame)
    assert figures and split.keys() == figures.keys()
    for day, cost in figures.items():
        assert split[day] == pytest.approx(cost, rel=1e-12, abs=1e-9), day
    assert_bill_is_the_figure_on_billed_days(scope, name, start, end)
    # Provisional days (33 and 34: no bill yet) are usage only.
    for n in (33, 34):
        kinds = frame.loc[frame["day"] == pd.Timestamp(w.START + timedelta(n)),
                          "record_type"]  # fmt: skip
        assert list(kinds) == ["usage"]
    # The forecast's spend to date is the month's figures so far.
    today = date(2026, 10, 6)
    forecast = month_forecast_read(scope=scope, name=name, currency="USD",
                                   today=today)  # fmt: skip
    assert forecast is not None
    to_date = math.fsum(v for d, v in figures.items() if date(2026, 10, 1) <= d < today)
    assert forecast.to_date == pytest.approx(to_date, rel=1e-12, abs=1e-9)


def test_the_credit_in_solos_share_is_a_lump_of_solo_its_team_and_the_fleet(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    start, end = w.START, w.START + timedelta(days=w.DAYS)
    credit_day = w.START + timedelta(days=w.CREDIT_DAY)
    for scope, name in (("deployment", "solo"), ("team", "t1"), ("fleet", "fleet")):
        frame = spend_frame_read(scope, name, "USD", start, end)
        assert rows_of(frame, "credit") == {credit_day: float(w.CREDIT)}, name
        # Solo's usage that day is still its $19.20 (the figure: -$10.80).
        assert rows_of(frame, "usage")[credit_day] == pytest.approx(
            float(w.SOLO_DAY_BILL) + (614.4 if scope == "fleet" else 0.0)
        )
    for scope, name in (("deployment", "a"), ("team", "t2"), ("pool", "p")):
        frame = spend_frame_read(scope, name, "USD", start, end)
        assert set(frame["record_type"]) == {"usage"}, name


def test_the_forecast_fits_solos_usage_without_the_credit_day(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    today = date(2026, 9, 22)  # 15 days known, the credit on the 19th among them
    f = month_forecast_read(scope="deployment", name="solo", currency="USD",
                            today=today)  # fmt: skip
    assert f is not None
    known = figure_costs("deployment", "solo", w.START, today)
    assert f.to_date == pytest.approx(math.fsum(known.values()), rel=1e-12)
    # Usage is $19.20 every day: the rest of September is 9 such days.
    assert f.remaining_days == 9
    assert f.point == pytest.approx(f.to_date + 9 * 19.2, rel=1e-6)
    # One model for everything reads the -$10.80 day as daily spend.
    single = forecast_month(
        pd.DataFrame(
            {"day": [pd.Timestamp(d) for d in known], "cost": list(known.values())}
        ),
        as_of=pd.Timestamp(today - timedelta(days=1)),
    )
    assert single.to_date == pytest.approx(f.to_date, rel=1e-12)
    assert abs(single.point - (f.to_date + 9 * 19.2)) > 1.0


# --- the demo ----------------------------------------------------------------------

DEMO_END = datetime(2026, 12, 2, tzinfo=UTC)
DEMO_DAYS = 100


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=DEMO_END, days=DEMO_DAYS):
        yield


def demo_credits() -> dict[date, float]:
    """The demo's credit lines per UTC day, from the stored bill."""
    out: dict[date, float] = defaultdict(float)
    for start, amount in CostLine.objects.filter(record_type="credit").values_list(
        "period_start", "amortized_cost"
    ):
        out[start.astimezone(UTC).date()] += float(amount)
    return dict(out)


def test_the_demo_fleet_forecast_takes_the_monthly_credit_as_a_lump(
    demo: None,
) -> None:
    today = date(2026, 11, 16)
    start = today.replace(day=1) - timedelta(days=70)
    credits = {d: v for d, v in demo_credits().items() if start <= d < today}
    assert len(credits) >= 2 and all(d.day == 1 for d in credits)
    frame = spend_frame_read("fleet", "fleet", "USD", start, today)
    assert rows_of(frame, "credit") == pytest.approx(credits)
    assert_bill_is_the_figure_on_billed_days("fleet", "fleet", start, today)
    figures = figure_costs("fleet", "fleet", start, today)
    assert frame_days(frame) == pytest.approx(figures, rel=1e-12)

    f = month_forecast_read(scope="fleet", name="fleet", currency="USD", today=today)
    assert f is not None
    # The same forecast from the figures and the bill's credit lines, built here.
    days = [pd.Timestamp(d) for d in figures]
    usage = [v - credits.get(d, 0.0) for d, v in figures.items()]
    by_type = pd.DataFrame(
        {
            "day": days + [pd.Timestamp(d) for d in credits],
            "record_type": ["usage"] * len(days) + ["credit"] * len(credits),
            "cost": usage + list(credits.values()),
        }
    )
    expected = forecast_month(by_type, as_of=pd.Timestamp(today - timedelta(1)),
                              series="fleet/fleet", interval=0.8)  # fmt: skip
    assert (f.point, f.lower, f.upper) == pytest.approx(
        (expected.point, expected.lower, expected.upper), rel=1e-9
    )
    assert f.to_date == pytest.approx(math.fsum(
        v for d, v in figures.items() if d >= today.replace(day=1)), rel=1e-12)  # fmt: skip
    single = forecast_month(
        pd.DataFrame({"day": days, "cost": list(figures.values())}),
        as_of=pd.Timestamp(today - timedelta(1)),
    )
    assert single.point != pytest.approx(f.point, rel=1e-6)


def test_the_demo_team_forecasts_read_their_bill_which_holds_no_lumps(
    demo: None,
) -> None:
    today = date(2026, 11, 16)
    start = today.replace(day=1) - timedelta(days=70)
    teams = sorted(
        set(UnitCostFigure.objects.filter(scope="team").values_list("name", flat=True))
    )
    assert len(teams) >= 3
    for team in teams:
        frame = spend_frame_read("team", team, "USD", start, today)
        # The demo's only lump (the untagged credit) is unallocated: the fleet's.
        assert set(frame["record_type"]) == {"usage"}, team
        figures = figure_costs("team", team, start, today)
        assert frame_days(frame) == pytest.approx(figures, rel=1e-12), team
        # The bill picked is the team's figure: p5-chat, used by assistant
        # alone, with its idle; a100-mig, shared by devtools and trust, only
        # their members' shares (its idle is the fleet's).
        assert_bill_is_the_figure_on_billed_days("team", team, start, today)
        f = month_forecast_read(scope="team", name=team, currency="USD", today=today)
        assert f is not None and f.lumps_expected == 0.0
        assert f.to_date == pytest.approx(
            math.fsum(v for d, v in figures.items() if d >= today.replace(day=1)),
            rel=1e-12,
        )


def test_the_benchmarks_demo_backtest_reports_the_apps_own_forecast(
    demo: None,
) -> None:
    from bench.bench_forecast import demo_app_backtest

    res = demo_app_backtest(origins=(15,), smoke=True)
    assert len(res) == 1
    row = res.iloc[0]
    assert (row["series"], row["month"]) == ("fleet/fleet", pd.Timestamp("2026-11-01"))
    f = month_forecast_read(
        scope="fleet", name="fleet", currency="USD", today=date(2026, 11, 16)
    )
    assert f is not None
    assert (row["point"], row["lower"], row["upper"]) == (f.point, f.lower, f.upper)
    november = figure_costs("fleet", "fleet", date(2026, 11, 1), date(2026, 12, 1))
    assert len(november) == 30
    assert row["actual"] == pytest.approx(math.fsum(november.values()), rel=1e-12)
