"""Stored figures against hand-computed ones, and incremental == full."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
import time_machine
from django.core.management import call_command

from analytics.unit_cost_frames import NOTE_GPU_UNKNOWN, figure_frames
from costapp.economics.unit_costs.inputs import recompute_inputs_read
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import CostLine, DeploymentHour, UnitCostFigure
from costapp.models.economics import FLEET
from tests.economics import world as w

pytestmark = [pytest.mark.django_db]

NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)
LATER = NOW + timedelta(hours=5)


def day(scope: str, name: str, n: int) -> UnitCostFigure:
    return UnitCostFigure.objects.get(
        scope=scope, name=name, grain="day", period_start=w.day_start(n)
    )


def hand_requests(name: str, n: int) -> float:
    return 24 * w.requests_per_hour(name, n)


def test_a_billed_day_costs_its_bill_and_its_unit_costs_are_the_bill_over_traffic(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    f = day("deployment", "solo", 3)
    requests = hand_requests("solo", 3)
    assert f.cost == w.SOLO_DAY_BILL
    assert (f.clock, f.rate_source) == ("final", "bill")
    assert f.requests == pytest.approx(requests, rel=1e-12)
    assert f.cost_per_1k_requests == pytest.approx(19.2 / requests * 1000, rel=1e-12)
    assert f.cost_per_1m_tokens == pytest.approx(19.2 / (requests * 1200) * 1e6)
    assert f.cost_per_gpu_hour == pytest.approx(0.80, rel=1e-12)
    assert f.tokens_per_gpu_second == pytest.approx(requests * 1200 / (24 * 3600))
    assert f.list_cost == Decimal("22.656000000000")  # 24 h x the rate card
    # The pool is shared by two teams: its idle (120 of 192 GPU-hours) is the
    # fleet's, and the fleet is fully loaded.
    pool = day("pool", "p", 3)
    assert pool.cost == w.POOL_DAY_BILL
    assert pool.idle_cost == Decimal("384.000000000000")
    member = day("deployment", "a", 3)
    assert member.cost == Decimal("153.600000000000")  # 48 of the 192 GPU-hours
    fleet = day("fleet", "fleet", 3)
    assert fleet.cost == w.SOLO_DAY_BILL + w.POOL_DAY_BILL
    assert fleet.idle_cost == Decimal("384.000000000000")
    total = sum(hand_requests(n, 3) for n in ("solo", "a", "b"))
    assert fleet.cost_per_1k_requests == pytest.approx(633.6 / total * 1000)
    assert day("team", "t2", 3).cost == member.cost  # members only: idle is shared
    # Past warm-up a steady weekday sits on its baselines, per request and per token.
    steady = day("deployment", "solo", 22)
    assert steady.baseline == pytest.approx(steady.cost_per_1k_requests, rel=1e-9)
    assert steady.baseline_per_1m_tokens == pytest.approx(
        steady.cost_per_1m_tokens, rel=1e-9
    )


def test_a_day_without_finished_requests_has_no_unit_cost_not_an_infinite_one(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    f = day("deployment", "solo", w.ZERO_REQUEST_DAY)
    assert f.cost == w.SOLO_DAY_BILL  # the GPU was paid for all the same
    assert f.requests == 0
    assert f.cost_per_1k_requests is None
    assert f.cost_per_1m_tokens is None
    assert f.flag == ""


def test_a_credit_larger_than_the_day_gives_a_negative_figure_and_no_flag(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    f = day("deployment", "solo", w.CREDIT_DAY)
    assert f.cost == w.SOLO_DAY_BILL + w.CREDIT == Decimal("-10.8")
    requests = hand_requests("solo", w.CREDIT_DAY)
    assert f.cost_per_1k_requests == pytest.approx(-10.8 / requests * 1000)
    assert f.flag == "" and f.parts == {}
    # The credit does not drag the next same-weekday baseline down.
    after = day("deployment", "solo", w.CREDIT_DAY + 7)
    assert after.baseline == pytest.approx(after.cost_per_1k_requests, rel=1e-9)


def test_unbilled_days_priced_at_the_learnt_rate_raise_no_flag_though_the_card_is_18pc_above(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    for n in (w.BILLED_DAYS, w.BILLED_DAYS + 1):
        f = day("deployment", "solo", n)
        assert (f.clock, f.rate_source) == ("provisional", "effective")
        assert f.effective_rate == pytest.approx(0.80, rel=1e-12)
        assert float(f.cost) == pytest.approx(19.2, rel=1e-12)
        assert float(f.list_cost) / float(f.cost) == pytest.approx(1.18, rel=1e-12)
        assert f.flag == "", f.cause
        # Priced from the rate card the day would have left its band.
        on_card = float(f.list_cost) / f.requests * 1000
        assert f.upper is not None and on_card > f.upper
    assert day("deployment", "solo", w.ESTIMATED_DAY).clock == "estimated"
    assert not UnitCostFigure.objects.filter(grain="day").exclude(flag="").exists()


def test_a_day_with_unknown_gpu_seconds_has_no_provisional_cost_and_says_why(
    world: w.World,
) -> None:
    # The column becomes nullable with the telemetry branch; the recompute
    # reads NULL as NaN, which is what this feeds it.
    inputs = recompute_inputs_read()
    hours = inputs.hours
    unknown_billed = (hours["deployment"] == "solo") & (
        hours["period_start"] == w.day_start(4).replace(tzinfo=None)
    )
    unknown_unbilled = (hours["deployment"] == "solo") & (
        hours["period_start"]
        == (w.day_start(w.BILLED_DAYS) + timedelta(hours=7)).replace(tzinfo=None)
    )
    hours.loc[unknown_billed | unknown_unbilled, "gpu_hours"] = np.nan
    frames = figure_frames(inputs, fleet=FLEET)
    days = frames["day"].set_index(["scope", "name", "period_start"])
    unbilled = days.loc[
        ("deployment", "solo", w.day_start(w.BILLED_DAYS).replace(tzinfo=None))
    ]
    assert math.isnan(unbilled["cost"]) and math.isnan(unbilled["gpu_hours"])
    assert unbilled["note"] == NOTE_GPU_UNKNOWN
    billed = days.loc[("deployment", "solo", w.day_start(4).replace(tzinfo=None))]
    assert billed["cost"] == pytest.approx(19.2)  # the bill does not need GPU-hours
    assert math.isnan(billed["gpu_hours"])
    # A missing member makes the fleet's unbilled day unknown, not smaller.
    fleet = days.loc[
        ("fleet", "fleet", w.day_start(w.BILLED_DAYS).replace(tzinfo=None))
    ]
    assert math.isnan(fleet["cost"])
    hour = frames["hour"].set_index(["scope", "name", "period_start"])
    h = hour.loc[
        ("deployment", "solo",
         (w.day_start(w.BILLED_DAYS) + timedelta(hours=7)).replace(tzinfo=None))
    ]  # fmt: skip
    assert math.isnan(h["cost"]) and h["note"] == NOTE_GPU_UNKNOWN


# --- incremental == full ------------------------------------------------------------

FIELDS = [
    f.name
    for f in UnitCostFigure._meta.get_fields()
    # When a figure was computed, and since when it stood as it is, depend on
    # the clock of the recompute, not on its inputs.
    if f.name not in ("id", "computed_at", "known_since")
]
KEY = ("scope", "name", "grain", "period_start", "currency")


def snapshot() -> dict[tuple[Any, ...], dict[str, Any]]:
    return {
        tuple(row[k] for k in KEY): row
        for row in UnitCostFigure.objects.values(*FIELDS, "computed_at")
    }


def assert_same(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    for key in left:
        a, b = left[key], right[key]
        for name in FIELDS:
            x, y = a[name], b[name]
            if isinstance(x, float | Decimal) and isinstance(y, float | Decimal):
                assert float(x) == pytest.approx(float(y), rel=1e-9, abs=1e-9), (
                    key,
                    name,
                )
            elif isinstance(x, dict):
                assert x.keys() == y.keys(), (key, name)
                for part in x:
                    assert x[part] == pytest.approx(y[part], rel=1e-9, abs=1e-9)
            else:
                assert x == y, (key, name, x, y)


def test_a_restated_day_recomputed_incrementally_equals_the_full_recompute(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    before = snapshot()
    restated = 20
    CostLine.objects.filter(tag_value="p", period_start=w.day_start(restated)).update(
        amortized_cost=Decimal("700.000000000000")
    )
    result = unit_costs_recompute(now=LATER, since=(w.START + timedelta(restated)))
    incremental = snapshot()
    assert result.rows_written < len(before)
    # Rows before the restated day were not rewritten but for the two days
    # (and the hours of the day) before it, whose flags read the days after
    # them (analytics.sustained.settled_runs); the day itself moved. Weeks
    # and months holding those days are rewritten whole.
    firsts = {"hour": w.day_start(restated - 1), "day": w.day_start(restated - 2),
              "week": w.day_start(14), "month": datetime(2026, 9, 1, tzinfo=UTC)}  # fmt: skip
    for key, row in incremental.items():
        assert (row["computed_at"] == NOW) == (key[3] < firsts[key[2]]), key
    moved = w.day_start(restated)
    assert incremental[("pool", "p", "day", moved, "USD")]["cost"] == Decimal("700")
    assert before[("pool", "p", "day", moved, "USD")]["cost"] == w.POOL_DAY_BILL
    with time_machine.travel(LATER, tick=False):
        call_command("unit_costs_recompute", verbosity=0)
    assert_same(incremental, snapshot())


def test_a_late_telemetry_hour_recomputes_its_series_and_pool_siblings_like_a_full_one(
    world: w.World,
) -> None:
    unit_costs_recompute(now=NOW)
    before = snapshot()
    DeploymentHour.objects.bulk_create([w.hour_row(world.a, w.LATE_DAY, w.LATE_HOUR)])
    result = unit_costs_recompute(
        now=LATER, since=w.START + timedelta(w.LATE_DAY), series=["a"]
    )
    assert result.series is not None
    assert ("deployment", "b") in result.series  # a pool sibling
    assert ("deployment", "solo") not in result.series
    incremental = snapshot()
    late = w.day_start(w.LATE_DAY)
    # a used more of the node, so the pool's idle shrank; b, its sibling, was
    # recomputed with it (its share of the node is its own GPU-hours).
    pool_key = ("pool", "p", "day", late, "USD")
    assert incremental[pool_key]["idle_cost"] < before[pool_key]["idle_cost"]
    a_key = ("deployment", "a", "day", late, "USD")
    assert incremental[a_key]["cost"] > before[a_key]["cost"]
    assert incremental[("deployment", "b", "day", late, "USD")]["computed_at"] == LATER
    assert incremental[("deployment", "solo", "day", late, "USD")]["computed_at"] == NOW
    unit_costs_recompute(now=LATER)
    assert_same(incremental, snapshot())


def test_the_full_recompute_is_idempotent_and_the_command_says_what_it_wrote(
    world: w.World, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("unit_costs_recompute")
    first = snapshot()
    call_command("unit_costs_recompute")
    assert_same(first, snapshot())
    out = capsys.readouterr().out
    assert "pipeline: ran here, no broker configured (" in out
    assert f"unit costs and baselines: {len(first)} rows" in out
    hours = UnitCostFigure.objects.filter(grain="hour", scope="deployment").count()
    assert hours == DeploymentHour.objects.count()


def test_the_pipeline_after_a_telemetry_run_recomputes_its_deployments_from_its_first_day(
    world: w.World, django_capture_on_commit_callbacks: Any
) -> None:
    from costapp.models import IngestRun
    from costapp.pipeline.runs import run_followups
    from costapp.pipeline.tasks import pipeline_queue

    unit_costs_recompute(now=NOW)
    run = IngestRun.objects.create(
        source="prometheus",
        target="solo",
        window_start=w.day_start(30),
        window_end=w.day_start(31),
        status=IngestRun.SUCCEEDED,
    )
    DeploymentHour.objects.filter(
        deployment=world.solo, hour__gte=w.day_start(30), hour__lt=w.day_start(31)
    ).update(run=run, requests_stop=0.0)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        pipeline_queue(run_followups(run))
    # Queued after commit, run eagerly here, each step queueing the next.
    assert len(callbacks) >= 5
    rewritten = UnitCostFigure.objects.exclude(computed_at=NOW)
    assert rewritten.exists()
    assert set(rewritten.values_list("scope", "name").distinct()) == {
        ("deployment", "solo"), ("team", "t1"), ("fleet", "fleet"),
    }  # fmt: skip
    # Days from two before the run's first day, hours from the day before it
    # (their flags read the periods after them); weeks and months holding
    # those days whole.
    assert not rewritten.filter(grain="day", period_start__lt=w.day_start(28)).exists()
    assert rewritten.filter(grain="day", period_start=w.day_start(28)).exists()
    assert not rewritten.filter(grain="hour", period_start__lt=w.day_start(29)).exists()
    assert not rewritten.filter(period_start__lt=w.day_start(24)).exists()  # 1 Oct
    f = day("deployment", "solo", 30)
    assert f.requests == pytest.approx(hand_requests("solo", 30) * 0.05)


def test_a_recompute_with_nothing_ingested_writes_nothing_and_does_not_fail() -> None:
    result = unit_costs_recompute(now=NOW)
    assert (result.rows_written, result.flagged) == (0, 0)


def test_a_flagged_fleet_day_splits_into_factor_idle_and_mix_parts_with_no_residual(
    world: w.World,
) -> None:
    # The pool's bill jumps by 46% on one day at unchanged usage.
    CostLine.objects.filter(tag_value="p", period_start=w.day_start(30)).update(
        amortized_cost=Decimal("900.000000000000")
    )
    unit_costs_recompute(now=NOW)
    fleet = day("fleet", "fleet", 30)
    assert fleet.flag == "anomaly"
    parts = fleet.parts
    assert {"price", "fleet", "traffic", "size", "idle", "mix"} <= parts.keys()
    total = math.fsum(
        parts[k] for k in ("price", "fleet", "traffic", "size", "idle", "mix")
    )
    assert total == pytest.approx(fleet.cost_per_1k_requests - fleet.baseline, rel=1e-9)
    # The node got dearer for everyone on it: price carries the change.
    assert parts["price"] > 0.9 * total
    assert abs(parts["mix"]) < 1e-3 * total  # no traffic moved between deployments
