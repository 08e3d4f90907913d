from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.unit_costs import (
    MIN_REQUESTS,
    daily_unit_costs,
    per_1k_requests,
    per_1m_tokens,
    relative_change,
    totals_by_deployment,
    truncation_share,
    window_totals,
)


def test_cost_per_1k_requests_is_cost_over_requests_times_1000() -> None:
    assert per_1k_requests(12.5, 50_000) == 0.25
    assert per_1m_tokens(12.5, 5_000_000) == 2.5


def test_it_never_divides_by_zero_requests() -> None:
    assert math.isnan(per_1k_requests(10.0, 0))
    frame = daily_unit_costs(
        pd.DataFrame({"cost": [10.0, 10.0], "requests": [0.0, 1e6], "tokens": [0, 0]})
    )
    assert math.isnan(frame["cost_per_1k_requests"][0])
    assert frame["cost_per_1k_requests"][1] == 0.01
    assert math.isnan(frame["cost_per_1m_tokens"][1])


def test_days_under_the_minimum_volume_have_no_unit_cost() -> None:
    assert math.isnan(per_1k_requests(5.0, MIN_REQUESTS - 1))
    assert per_1k_requests(5.0, MIN_REQUESTS) == 5.0 / MIN_REQUESTS * 1000


def test_window_unit_costs_are_ratios_of_sums_not_means_of_ratios() -> None:
    days = pd.DataFrame(
        {"cost": [10.0, 30.0], "requests": [10_000.0, 10_000.0], "tokens": [1e6, 3e6]}
    )
    totals = window_totals(days)
    assert totals.cost_per_1k_requests == 2.0
    assert totals.cost_per_1m_tokens == 10.0


def test_totals_by_deployment_sum_each_deployment() -> None:
    days = pd.DataFrame(
        {
            "deployment": ["a", "a", "b"],
            "cost": [1.0, 2.0, 4.0],
            "requests": [1000.0, 2000.0, 500.0],
            "tokens": [1e6, 1e6, 1e6],
        }
    )
    out = totals_by_deployment(days).set_index("deployment")
    assert out.loc["a", "cost_per_1k_requests"] == 1.0
    assert out.loc["b", "cost_per_1m_tokens"] == 4.0
    assert totals_by_deployment(days.iloc[0:0]).empty


def test_truncation_share_and_relative_change() -> None:
    assert truncation_share(90, 10) == 0.1
    assert math.isnan(truncation_share(0, 0))
    assert relative_change(1.4, 1.0) == 1.4 / 1.0 - 1
    assert math.isnan(relative_change(1.0, 0.0))


@given(
    cost=st.floats(0, 1e7, allow_nan=False, allow_subnormal=False),
    requests=st.floats(0, 1e9, allow_nan=False),
)
def test_unit_costs_are_never_negative_and_scale_with_cost(
    cost: float, requests: float
) -> None:
    value = per_1k_requests(cost, requests)
    if requests < MIN_REQUESTS:
        assert math.isnan(value)
    else:
        assert value >= 0
        # Equal but for the last bit where the ratio falls in the subnormal
        # range (below ~1e-308 rounding is absolute, so 2x rounds differently).
        assert math.isclose(
            per_1k_requests(2 * cost, requests),
            2 * value,
            rel_tol=1e-15,
            abs_tol=1e-300,
        )


def test_every_unit_figure_by_hand() -> None:
    from analytics.unit_costs import unit_costs

    frame = pd.DataFrame(
        {
            "cost": [36.0],
            "requests": [10_000.0],
            "prompt_tokens": [4e6],
            "generation_tokens": [2e6],
            "gpu_hours": [18.0],
            "prefill_seconds": [1000.0],
            "decode_seconds": [3000.0],
            "clock": ["provisional"],
        }
    )
    out = unit_costs(frame).iloc[0]
    assert out["cost_per_1k_requests"] == 3.6
    assert out["cost_per_1m_tokens"] == 6.0
    assert out["cost_per_gpu_hour"] == 2.0
    assert out["tokens_per_gpu_second"] == pytest.approx(6e6 / (18 * 3600))
    # Time rule: prefill is a quarter of the phase seconds.
    assert out["prompt_rule"] == "time"
    assert out["cost_per_1m_prompt_tokens"] == pytest.approx(9.0 / 4)
    assert out["cost_per_1m_generation_tokens"] == pytest.approx(27.0 / 2)
    assert out["clock"] == "provisional"


def test_without_phase_times_the_split_follows_the_tokens() -> None:
    from analytics.unit_costs import unit_costs

    frame = pd.DataFrame(
        {
            "cost": [30.0],
            "requests": [1e4],
            "prompt_tokens": [2e6],
            "generation_tokens": [1e6],
        }
    )
    out = unit_costs(frame).iloc[0]
    assert out["prompt_rule"] == "tokens"
    assert out["cost_per_1m_prompt_tokens"] == pytest.approx(10.0)
    assert out["cost_per_1m_generation_tokens"] == pytest.approx(10.0)


def test_missing_telemetry_and_zero_requests_leave_figures_missing() -> None:
    from analytics.unit_costs import unit_costs

    frame = pd.DataFrame(
        {
            "cost": [10.0, -3.0],
            "requests": [0.0, 5e3],
            "tokens": [1e6, 1e6],
            "gpu_hours": [np.nan, 2.0],
        }
    )
    out = unit_costs(frame)
    assert math.isnan(out["cost_per_1k_requests"][0])
    assert math.isnan(out["cost_per_gpu_hour"][0])
    assert math.isnan(out["tokens_per_gpu_second"][0])
    # A credit (negative cost) is shown as such, not hidden.
    assert out["cost_per_1k_requests"][1] == pytest.approx(-0.6)
    assert out["prompt_rule"].tolist() == ["", ""]


def test_rollup_sums_days_into_monday_weeks_and_months_and_a_missing_day_is_missing() -> (
    None
):
    from analytics.unit_costs import period_of, rollup

    days = pd.date_range("2026-09-28", periods=10, freq="D")  # Mon 28 Sep - Wed 7 Oct
    frame = pd.DataFrame(
        {"series": "s", "period_start": days, "cost": [1.0] * 10,
         "requests": [10.0] * 9 + [float("nan")]}
    )  # fmt: skip
    assert list(period_of(days[[0, 6, 7]], "week")) == [
        pd.Timestamp("2026-09-28"), pd.Timestamp("2026-09-28"),
        pd.Timestamp("2026-10-05"),
    ]  # fmt: skip
    weeks = rollup(frame, keys=["series"], grain="week", summed=["cost", "requests"])
    assert weeks["period_start"].tolist() == [
        pd.Timestamp("2026-09-28"),
        pd.Timestamp("2026-10-05"),
    ]
    assert weeks["cost"].tolist() == [7.0, 3.0]
    assert weeks["requests"].iloc[0] == 70.0
    assert np.isnan(weeks["requests"].iloc[1])  # 7 Oct unknown: the week is
    assert weeks["days"].tolist() == [7, 3]
    months = rollup(frame, keys=["series"], grain="month", summed=["cost"])
    assert months["period_start"].tolist() == [
        pd.Timestamp("2026-09-01"),
        pd.Timestamp("2026-10-01"),
    ]
    assert months["cost"].tolist() == [3.0, 7.0]
    assert months["days"].tolist() == [3, 7]
