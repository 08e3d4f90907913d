"""What moved between two periods (analytics.moved): sums, the parts of the
change in $ per 1k and in spend, the clock part, sorting."""

from __future__ import annotations

import math
from datetime import date

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.errors import InvalidInput
from analytics.moved import (
    PARTS,
    SPEND_PARTS,
    moved,
    moved_sorted,
    period_sums,
    previous_period,
)


def _day(
    name: str = "a", clock: str = "final", **kw: float | None
) -> dict[str, object]:
    base: dict[str, object] = {
        "scope": "deployment",
        "name": name,
        "currency": "USD",
        "clock": clock,
        "cost": 100.0,
        "requests": 10_000.0,
        "gpu_hours": 40.0,
        "tokens": 5e6,
        "list_cost": 120.0,
    }
    return base | kw


def _moved(
    now: list[dict[str, object]], before: list[dict[str, object]]
) -> pd.DataFrame:
    return moved(period_sums(pd.DataFrame(now)), period_sums(pd.DataFrame(before)))


def test_the_previous_period_has_the_same_length_and_ends_at_the_start() -> None:
    assert previous_period(date(2026, 11, 23), date(2026, 11, 30)) == (
        date(2026, 11, 16),
        date(2026, 11, 23),
    )
    with pytest.raises(InvalidInput, match="end='2026-11-23'"):
        previous_period(date(2026, 11, 23), date(2026, 11, 23))


def test_more_gpu_hours_at_unchanged_traffic_is_fleet_in_both_changes() -> None:
    out = _moved([_day(cost=150.0, gpu_hours=60.0, list_cost=180.0)], [_day()]).iloc[0]
    assert out["change"] == pytest.approx(5.0)  # $10 -> $15 per 1k
    assert out["fleet"] == pytest.approx(5.0)
    assert out["price"] == pytest.approx(0.0, abs=1e-12)
    assert out["clock"] == 0.0
    assert out["spend_change"] == pytest.approx(50.0)
    assert out["spend_fleet"] == pytest.approx(50.0)


def test_a_switch_from_provisional_to_billed_is_the_clock_part_not_price() -> None:
    # Same GPU-hours and traffic; the bill is 10% under the rate card.
    out = _moved(
        [_day(cost=108.0, list_cost=120.0, clock="final")],
        [_day(cost=120.0, list_cost=120.0, clock="provisional")],
    ).iloc[0]
    assert out["clocks_b"] == "provisional" and out["clocks"] == "final"
    assert out["clock"] == pytest.approx(out["change"])
    assert out["price"] == pytest.approx(0.0, abs=1e-12)
    # On the same clock the same fall is a price (a discount on the bill).
    same = _moved([_day(cost=108.0)], [_day(cost=120.0)]).iloc[0]
    assert same["clock"] == 0.0
    assert same["price"] == pytest.approx(same["change"])


def test_a_day_without_gpu_hours_leaves_price_and_fleet_missing_not_zero() -> None:
    out = _moved([_day(), _day(gpu_hours=None)], [_day(), _day()]).iloc[0]
    assert math.isnan(out["price"]) and math.isnan(out["fleet"])
    assert math.isnan(out["spend_fleet"])
    assert not math.isnan(out["cost"]) and not math.isnan(out["change"])


def test_a_day_without_cost_is_left_out_of_both_sides_of_its_ratio() -> None:
    sums = period_sums(pd.DataFrame([_day(), _day(cost=None, requests=99_999.0)]))
    row = sums.iloc[0]
    assert (row["days"], row["days_missing"]) == (1, 1)
    assert row["requests"] == 10_000.0


def test_a_series_in_one_period_only_has_no_change_and_says_why() -> None:
    out = _moved([_day("new")], [_day("old")]).set_index("name")
    assert out.loc["new", "reason"] == "no figures in the previous period"
    assert out.loc["old", "reason"] == "no figures in the period"
    assert math.isnan(out.loc["new", "change"]) and math.isnan(out.loc["new", "price"])


positive = st.floats(min_value=0.01, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    now=st.tuples(positive, positive, positive, positive, positive),
    before=st.tuples(positive, positive, positive, positive, positive),
    clocks=st.sampled_from(
        [("final", "final"), ("final", "provisional"), ("estimated", "final")]
    ),
)
def test_the_parts_always_sum_to_each_change(
    now: tuple[float, ...], before: tuple[float, ...], clocks: tuple[str, str]
) -> None:
    def day(values: tuple[float, ...], clock: str) -> dict[str, object]:
        cost, requests, gpu_hours, tokens, list_cost = values
        return _day(clock=clock, cost=cost, requests=requests, gpu_hours=gpu_hours,
                    tokens=tokens, list_cost=list_cost)  # fmt: skip

    out = _moved([day(now, clocks[0])], [day(before, clocks[1])]).iloc[0]
    parts = math.fsum(out[p] for p in PARTS)
    assert parts == pytest.approx(out["change"], rel=1e-9, abs=1e-9 * out["u"])
    spend = math.fsum(out[p] for p in SPEND_PARTS)
    assert spend == pytest.approx(
        out["spend_change"], rel=1e-9, abs=1e-9 * out["spend"]
    )
    assert out["cost"] == pytest.approx(
        out["price"] + out["fleet"] + out["clock"], rel=1e-9, abs=1e-9 * out["u"]
    )


def test_sorting_is_by_a_known_column_with_missing_last_either_way() -> None:
    out = _moved(
        [_day("a", cost=150.0), _day("b", cost=90.0), _day("c")],
        [_day("a"), _day("b")],
    )
    assert list(moved_sorted(out, "-change")["name"]) == ["a", "b", "c"]
    assert list(moved_sorted(out, "change")["name"]) == ["b", "a", "c"]
    with pytest.raises(InvalidInput, match="sort='drop table'"):
        moved_sorted(out, "drop table")
