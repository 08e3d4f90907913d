"""The incremental recompute resumes from the saved baseline state
(``BaselineCheckpoint``) and equals the full recompute to 1e-9."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest

from analytics import unit_cost_figures
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import BaselineCheckpoint, CostLine, DeploymentHour
from tests.economics import world as w
from tests.economics.test_recompute import LATER, NOW, assert_same, snapshot

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, pd.Timestamp, bool]]:
    """(grain, first period, resumed from a state) of every detection run."""
    seen: list[tuple[str, pd.Timestamp, bool]] = []
    real = unit_cost_figures.detect_run

    def spy(frame: pd.DataFrame, **kwargs: Any) -> Any:
        grain = kwargs["config"].grain
        first = pd.DatetimeIndex(frame["period_start"]).min()
        seen.append((grain, first, kwargs.get("initial") is not None))
        return real(frame, **kwargs)

    monkeypatch.setattr(unit_cost_figures, "detect_run", spy)
    return seen


def test_the_full_recompute_saves_a_state_before_every_week_and_month_and_lately(
    world: w.World,
) -> None:
    """At the start of every Sunday and month's last day (a week or month
    is rewritten whole, its first day reading the day before), and of each of
    the last three days (a refresh's hours resume two days back)."""
    unit_costs_recompute(now=NOW)
    days = sorted(
        BaselineCheckpoint.objects.filter(grain="day").values_list("day", flat=True)
    )
    sundays = [w.START + timedelta(days=6 + 7 * k) for k in range(5)]
    last = w.START + timedelta(days=w.DAYS - 1)  # a Sunday
    recent = [last - timedelta(days=k) for k in range(3)]
    expected = sorted({*sundays, w.START.replace(day=30), *recent})
    assert days == expected
    hours = BaselineCheckpoint.objects.filter(grain="hour").values_list(
        "day", flat=True
    )
    assert sorted(hours) == expected


def test_a_restated_day_resumes_from_the_day_before_its_week_and_month(
    world: w.World, starts: list[tuple[str, pd.Timestamp, bool]]
) -> None:
    unit_costs_recompute(now=NOW)
    starts.clear()
    restated = 30  # Wednesday 7 October: its week starts on Monday 5 October
    CostLine.objects.filter(tag_value="p", period_start=w.day_start(restated)).update(
        amortized_cost=Decimal("700.000000000000")
    )
    unit_costs_recompute(now=LATER, since=w.START + timedelta(restated))
    incremental = snapshot()
    # The first rewritten day is two before it (Monday 5 October), and a run
    # starts at least a day before its first rewritten period: days resume
    # on 30 September (the month holding the day starts before its week),
    # hours (rewritten from 6 October) on Sunday 4 October; neither from the
    # first day.
    assert ("day", pd.Timestamp("2026-09-30"), True) in starts
    assert ("hour", pd.Timestamp("2026-10-04"), True) in starts
    assert all(resumed for _g, _d, resumed in starts)
    unit_costs_recompute(now=LATER)
    assert_same(incremental, snapshot())


def test_a_pool_reallocation_resumed_from_the_saved_state_equals_the_full_recompute(
    world: w.World, starts: list[tuple[str, pd.Timestamp, bool]]
) -> None:
    unit_costs_recompute(now=NOW)
    before = snapshot()
    starts.clear()
    # From day 27 on, b runs on two GPUs of the node: the pool's bill is split
    # anew from that day (b's share doubles, the idle shrinks by as much).
    moved = 27
    DeploymentHour.objects.filter(
        deployment=world.b, hour__gte=w.day_start(moved)
    ).update(gpu_seconds=7200.0)
    unit_costs_recompute(now=LATER, since=w.START + timedelta(moved), series=["b"])
    incremental = snapshot()
    assert starts and all(resumed for _g, _d, resumed in starts)
    day = w.day_start(moved)
    b_key = ("deployment", "b", "day", day, "USD")
    assert incremental[b_key]["cost"] == 2 * before[b_key]["cost"]
    pool = ("pool", "p", "day", day, "USD")
    assert (
        incremental[pool]["idle_cost"]
        == before[pool]["idle_cost"] - before[b_key]["cost"]
    )
    sibling = ("deployment", "a", "day", day, "USD")
    assert incremental[sibling]["computed_at"] == LATER  # recomputed with it
    solo = ("deployment", "solo", "day", day, "USD")
    assert incremental[solo]["computed_at"] == NOW  # outside the pool
    unit_costs_recompute(now=LATER)
    assert_same(incremental, snapshot())


def test_a_late_hour_on_a_recompute_with_no_saved_state_runs_the_whole_history(
    world: w.World, starts: list[tuple[str, pd.Timestamp, bool]]
) -> None:
    unit_costs_recompute(now=NOW)
    BaselineCheckpoint.objects.all().delete()
    starts.clear()
    DeploymentHour.objects.bulk_create([w.hour_row(world.a, w.LATE_DAY, w.LATE_HOUR)])
    unit_costs_recompute(now=LATER, since=w.START + timedelta(w.LATE_DAY), series=["a"])
    incremental = snapshot()
    assert {(g, d) for g, d, _r in starts} == {
        ("day", pd.Timestamp(w.START)), ("hour", pd.Timestamp(w.START)),
    }  # fmt: skip
    unit_costs_recompute(now=LATER)
    assert_same(incremental, snapshot())
