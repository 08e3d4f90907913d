"""The demo tells its story through the stored figures: the incident is a cost
anomaly from more GPU-hours at unchanged traffic, the holiday a traffic dip."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from costapp.models import (
    UnitCostFigure,
)
from costapp.sources.demo import DemoEvents
from tests.support.demo_data import demo_for_module

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 56  # the holiday (end - 27 days) past the weekday slots' warm-up
EVENTS = DemoEvents.for_end(END)


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    """One demo load and recompute shared by the read-only tests here."""
    with demo_for_module(django_db_blocker, end=END, days=DAYS):
        yield


def days_of(scope: str, name: str) -> dict[object, UnitCostFigure]:
    return {
        f.period_start.date(): f
        for f in UnitCostFigure.objects.filter(scope=scope, name=name, grain="day")
    }


def test_the_incident_is_flagged_as_a_cost_anomaly_from_more_gpu_hours(
    demo: None,
) -> None:
    chat = days_of("deployment", "chat")
    first = EVENTS.incident_start.date()
    incident = [chat[first + timedelta(days=k)] for k in (1, 2)]  # whole days
    for f in incident:
        assert f.flag == "anomaly", (f.period_start, f.cause)
        parts = f.parts
        assert parts["fleet"] > 0.8 * (f.cost_per_1k_requests - f.baseline)
        assert abs(parts["price"]) < 0.1 * parts["fleet"]
        assert abs(parts["traffic"]) < 0.25 * parts["fleet"]
        assert "GPU-hours" in f.cause, f.cause
        # The sentence names the series that moved: more replicas (a day's
        # mean, against those the baseline's GPU-hours imply) at unchanged
        # traffic.
        moved = re.search(r": replicas ([\d.]+) → ([\d.]+), GPU-hours ", f.cause)
        assert moved, f.cause
        assert float(moved.group(2)) == round(f.replicas, 1)
        assert float(moved.group(1)) < float(moved.group(2))
        assert f.cause.endswith(" at unchanged traffic"), f.cause
    # The fleet, fully loaded, sees it too.
    fleet = days_of("fleet", "fleet")
    assert any(fleet[f.period_start.date()].flag == "anomaly" for f in incident)
    # Before the incident chat was in its band for a week.
    week = [chat[first - timedelta(days=k)] for k in range(1, 8)]
    assert all(f.flag == "" for f in week), [(f.period_start, f.cause) for f in week]


def test_the_holiday_is_classed_a_traffic_dip_not_an_anomaly(demo: None) -> None:
    holiday = EVENTS.holiday
    flags = {
        (f.scope, f.name): f.flag
        for f in UnitCostFigure.objects.filter(
            grain="day", period_start__date=holiday, scope__in=["deployment", "fleet"]
        )
    }
    assert flags[("fleet", "fleet")] == "traffic"
    assert "anomaly" not in {flags[("deployment", n)] for n in ("chat", "summarize",
                                                                 "classify")}  # fmt: skip


def test_the_fleet_file_declares_the_holiday_and_every_flag_on_it_is_a_dip(
    demo: None,
) -> None:
    from costapp.models import TeamHoliday

    declared = TeamHoliday.objects.get(name="demo holiday")
    assert (declared.team, declared.day) == ("*", EVENTS.holiday)
    on_holiday = UnitCostFigure.objects.filter(
        period_start__date=EVENTS.holiday
    ).exclude(flag="")
    assert on_holiday.filter(grain="day").exists()
    assert {f.flag for f in on_holiday} == {"traffic"}
    fleet = days_of("fleet", "fleet")[EVENTS.holiday]
    assert re.fullmatch(
        r"\$/1k requests [\d.]+ → [\d.]+ \(\+\d+%\): requests \u2212\d+% "
        r"\(tokens \u2212\d+%\), GPU-hours \u2212\d+%: holiday dip",
        fleet.cause,
    ), fleet.cause
    # Held out: the slot (Tuesdays) did not learn the dip, so the next
    # Tuesday is compared with the very baseline the holiday was.
    week_after = days_of("fleet", "fleet")[EVENTS.holiday + timedelta(days=7)]
    assert week_after.flag == ""
    assert week_after.baseline == pytest.approx(fleet.baseline, rel=1e-12)
