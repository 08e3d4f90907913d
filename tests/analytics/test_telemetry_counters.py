from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.telemetry import (
    counter_increases,
    hourly_counter_increases,
    hourly_gauge_stats,
)

pytestmark = pytest.mark.smoke


def test_a_reset_counts_the_new_value_as_the_increase() -> None:
    # pod restarts between 40 and 5: 5 requests since restart
    assert counter_increases([10, 25, 40, 5, 9]).tolist() == [0, 15, 15, 5, 4]


def test_the_jump_after_a_gap_lands_in_the_first_hour_with_samples() -> None:
    t = [0, 1800, 3599, 4 * 3600 + 60, 4 * 3600 + 120]  # hours 1..3 missing
    v = [0, 10, 20, 80, 85]
    by_hour = hourly_counter_increases(t, v)
    assert by_hour == {0: 20.0, 4 * 3600: 65.0}
    assert 3600 not in by_hour  # missing, not zero


def test_a_series_born_in_the_window_starts_from_zero() -> None:
    assert hourly_counter_increases([60, 120], [3, 5], born_in_window=True) == {0: 5.0}


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=200))
def test_hourly_sums_add_up_to_the_true_total_across_resets(steps: list[int]) -> None:
    # Build a counter that restarts every 17 samples; true total = sum of steps
    # after the first sample.
    values, current = [], 0
    for i, step in enumerate(steps):
        if i and i % 17 == 0 and current > step:  # a reset we can see
            current = step  # restart: counts `step` since the reset
        else:
            current += step
        values.append(current)
    t = np.arange(len(values)) * 61.0
    expected = sum(steps[1:])
    assert sum(hourly_counter_increases(t, values).values()) == pytest.approx(expected)


def test_gauge_stats_are_per_hour_mean_and_max() -> None:
    stats = hourly_gauge_stats([0, 60, 3600], [0.2, 0.4, 0.9])
    assert stats[0] == pytest.approx((0.3, 0.4, 2))
    assert stats[3600] == (0.9, 0.9, 1)
