from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.downsample import (
    MAX_POINTS,
    Grid,
    gauge,
    grid_for,
    heatmap,
    histogram_quantiles,
    max_columns_for,
    ratio_of_sums,
    sums,
)

pytestmark = pytest.mark.smoke

T0 = datetime(2026, 9, 1, tzinfo=UTC)
H = timedelta(hours=1)


def hours(n: int, start: datetime = T0) -> list[datetime]:
    return [start + i * H for i in range(n)]


def test_a_short_window_keeps_every_hour() -> None:
    grid = grid_for(T0, T0 + 48 * H)
    assert grid.width == pd.Timedelta(hours=1) and grid.count == 48


def test_ninety_days_of_hours_become_two_hour_points() -> None:
    grid = grid_for(T0, T0 + timedelta(days=90))
    assert grid.width == pd.Timedelta(hours=2)
    assert grid.count == 1080
    assert grid.starts[0] == pd.Timestamp(T0)


def test_a_year_of_hours_becomes_six_hour_points_within_the_limit() -> None:
    grid = grid_for(T0, T0 + timedelta(days=365))
    assert grid.width == pd.Timedelta(hours=6) and grid.count == 1460


def test_an_empty_window_has_no_buckets() -> None:
    assert grid_for(T0, T0).count == 0


def test_amounts_sum_per_bucket_and_an_empty_bucket_is_missing_not_zero() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=2), 3)
    times = [T0, T0 + H, T0 + 4 * H]  # hours 2-3 have no row
    frame = pd.DataFrame({"requests": [10.0, 5.0, 7.0], "cost": [1.5, np.nan, 2.0]})
    out = sums(grid, times, frame)
    assert out["requests"].tolist()[0] == 15.0
    assert math.isnan(out["requests"].iloc[1])
    assert out["requests"].iloc[2] == 7.0
    # A missing cost is skipped, not read as 0; only-missing would be NaN.
    assert out["cost"].tolist()[0] == 1.5


def test_a_strict_sum_is_missing_when_any_hour_is() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=2), 2)
    frame = pd.DataFrame({"gpu_seconds": [3600.0, np.nan, 100.0, 200.0]})
    out = sums(grid, hours(4), frame, strict=True)
    assert math.isnan(out["gpu_seconds"].iloc[0])
    assert out["gpu_seconds"].iloc[1] == 300.0


def test_rows_outside_the_grid_are_left_out() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=1), 2)
    out = sums(grid, [T0 - H, T0, T0 + 5 * H], pd.DataFrame({"x": [1.0, 2.0, 4.0]}))
    assert out["x"].iloc[0] == 2.0 and math.isnan(out["x"].iloc[1])


def test_a_unit_cost_is_the_ratio_of_sums_not_the_mean_of_ratios() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=2), 1)
    # $1 for 1,000 requests at the peak, $1 for 10 requests at 4 am:
    # $2 / 1,010 requests = $1.98 per 1k (the mean of ratios would be $50.50).
    out = ratio_of_sums(grid, hours(2), [1.0, 1.0], [1000.0, 10.0], scale=1000)
    assert out.iloc[0] == pytest.approx(2 / 1010 * 1000)


def test_a_ratio_skips_rows_with_one_side_missing_and_zero_denominators() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=1), 3)
    out = ratio_of_sums(grid, hours(3), [3.0, np.nan, 4.0], [6.0, 10.0, 0.0])
    assert out.iloc[0] == 0.5
    assert math.isnan(out.iloc[1])  # numerator unknown: not 0 / 10
    assert math.isnan(out.iloc[2])  # nothing to divide by


def test_a_gauge_is_the_mean_with_the_max_as_band() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=3), 2)
    out = gauge(
        grid,
        hours(3),
        [0.2, 0.4, np.nan],
        [0.5, 0.9, np.nan],
        weights=[1.0, 3.0, 1.0],
    )
    assert out["mean"].iloc[0] == pytest.approx((0.2 + 3 * 0.4) / 4)
    assert out["max"].iloc[0] == 0.9
    assert math.isnan(out["mean"].iloc[1]) and math.isnan(out["max"].iloc[1])


BOUNDS = (0.1, 0.5, 1.0, None)


def test_percentiles_come_from_summed_bucket_increases() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=2), 2)
    # Hour 1: 10 fast requests; hour 2: 90 in (0.1, 0.5]. Summed: 10, 100,
    # 100, 100; p50 at rank 50 is 0.1 + 0.4 * 40/90.
    out = histogram_quantiles(
        grid,
        hours(2),
        [BOUNDS, BOUNDS],
        [(10, 10, 10, 10), (0, 90, 90, 90)],
        quantiles=(0.5, 0.95),
    )
    assert out["p50"].iloc[0] == pytest.approx(0.1 + 0.4 * 40 / 90)
    assert out["p95"].iloc[0] == pytest.approx(0.1 + 0.4 * 85 / 90)
    assert out["count"].iloc[0] == 100
    assert math.isnan(out["p50"].iloc[1]) and math.isnan(out["count"].iloc[1])


def test_a_bucket_with_two_sets_of_bounds_has_no_percentile() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=1), 2)
    out = histogram_quantiles(
        grid,
        [T0, T0, T0 + H],
        [BOUNDS, (0.2, 0.5, 1.0, None), BOUNDS],
        [(1, 2, 3, 3), (1, 1, 1, 1), (0, 1, 1, 1)],
    )
    assert math.isnan(out["p50"].iloc[0])
    assert out["p50"].iloc[1] == pytest.approx(0.1 + 0.4 * 0.5)


def test_a_heatmap_cell_is_the_mean_of_its_hours_and_absent_is_blank() -> None:
    grid = Grid(pd.Timestamp(T0), pd.Timedelta(hours=2), 2)
    names, matrix = heatmap(
        grid,
        [T0, T0 + H, T0, T0 + 2 * H],
        ["gpu0", "gpu0", "gpu1", "gpu1"],
        [0.2, 0.6, np.nan, 0.9],
        order=["gpu0", "gpu1"],
    )
    assert names == ["gpu0", "gpu1"]
    assert matrix[0, 0] == pytest.approx(0.4)
    assert math.isnan(matrix[0, 1])  # gpu0 not seen in hours 2-3
    assert math.isnan(matrix[1, 0])  # gpu1 seen, but the gauge was missing
    assert matrix[1, 1] == 0.9


def test_heatmap_columns_are_bounded_by_points_and_cells() -> None:
    assert max_columns_for(4, max_cells=40_000) == MAX_POINTS
    assert max_columns_for(96, max_cells=40_000) == 416


# --- properties ----------------------------------------------------------------

series = st.lists(
    st.tuples(
        st.integers(0, 24 * 400 - 1),  # hour offset within 400 days
        st.integers(0, 10_000),  # an integer count: sums are exact
        st.integers(0, 10_000),
    ),
    min_size=1,
    max_size=300,
)


@given(series, st.integers(1, 3000))
def test_bucketing_never_loses_or_invents_an_amount(
    rows: list[tuple[int, int, int]], max_points: int
) -> None:
    grid = grid_for(T0, T0 + timedelta(days=400), max_points=max_points)
    assert grid.count <= max_points
    times = [T0 + h * H for h, _, _ in rows]
    frame = pd.DataFrame({"a": [float(a) for _, a, _ in rows]})
    out = sums(grid, times, frame)
    assert len(out) == grid.count <= max_points
    assert out["a"].sum() == sum(a for _, a, _ in rows)
    # A bucket is NaN exactly when no row fell in it.
    filled = set(grid.index_of(times))
    assert {i for i, v in enumerate(out["a"]) if not math.isnan(v)} == filled


@given(series)
def test_the_ratio_per_bucket_is_exactly_the_ratio_of_its_sums(
    rows: list[tuple[int, int, int]],
) -> None:
    grid = grid_for(T0, T0 + timedelta(days=400))
    times = [T0 + h * H for h, _, _ in rows]
    out = ratio_of_sums(grid, times, [a for _, a, _ in rows], [b for _, _, b in rows])
    index = grid.index_of(times)
    for bucket in set(index):
        num = sum(a for (_, a, _), i in zip(rows, index, strict=True) if i == bucket)
        den = sum(b for (_, _, b), i in zip(rows, index, strict=True) if i == bucket)
        if den == 0:
            assert math.isnan(out.iloc[bucket])
        else:
            assert out.iloc[bucket] == num / den


@given(st.integers(1, 24 * 3 * 366), st.integers(1, 2500))
def test_any_window_fits_the_point_limit(n_hours: int, max_points: int) -> None:
    grid = grid_for(T0, T0 + n_hours * H, max_points=max_points)
    assert 1 <= grid.count <= max_points
    assert grid.end >= pd.Timestamp(T0 + n_hours * H)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 200),
            st.lists(st.integers(0, 50), min_size=3, max_size=3),
        ),
        min_size=1,
        max_size=100,
    )
)
def test_summed_histogram_counts_are_preserved(
    rows: list[tuple[int, list[int]]],
) -> None:
    grid = grid_for(T0, T0 + 201 * H, max_points=20)
    times = [T0 + h * H for h, _ in rows]
    # Increments per bucket, made cumulative over the bounds.
    counts = [tuple(np.cumsum([*inc, 0]).tolist()) for _, inc in rows]
    out = histogram_quantiles(grid, times, [BOUNDS] * len(rows), counts)
    assert np.nansum(out["count"]) == sum(c[-1] for c in counts)
    assert ((out["p50"] <= out["p95"]) | out["p50"].isna()).all()
