from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.histograms import (
    BucketMismatch,
    Buckets,
    bucket_quantile,
    bucket_quantiles,
    buckets_sum,
)

BOUNDS = (0.1, 0.5, 1.0, None)


def test_it_interpolates_inside_the_bucket_like_histogram_quantile() -> None:
    b = Buckets(BOUNDS, (10.0, 60.0, 100.0, 100.0))
    # rank 50 is in (0.1, 0.5]: 10 below, 50 inside -> 0.1 + 0.4 * 40/50
    assert bucket_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * 40 / 50)
    assert bucket_quantile(0.05, b) == pytest.approx(0.05)  # first bucket from 0


def test_a_rank_in_the_inf_bucket_returns_the_highest_finite_bound() -> None:
    b = Buckets(BOUNDS, (0.0, 0.0, 1.0, 10.0))
    assert bucket_quantile(0.95, b) == 1.0


def test_no_observations_is_missing_not_zero() -> None:
    assert bucket_quantile(0.5, Buckets(BOUNDS, (0.0, 0.0, 0.0, 0.0))) is None
    assert buckets_sum([]) is None


def test_hours_add_bucket_by_bucket_and_refuse_other_bounds() -> None:
    total = buckets_sum([(BOUNDS, (1, 2, 3, 3)), (list(BOUNDS), (0, 1, 1, 2))])
    assert total == Buckets(BOUNDS, (1.0, 3.0, 4.0, 5.0))
    with pytest.raises(BucketMismatch):
        buckets_sum([(BOUNDS, (1, 2, 3, 3)), ((0.2, 0.5, 1.0, None), (0, 1, 1, 2))])


@given(st.lists(st.floats(0.001, 50.0), min_size=20, max_size=400))
def test_bucket_quantiles_land_in_the_bucket_of_the_exact_quantile(
    samples: list[float],
) -> None:
    bounds = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 100.0)
    data = np.asarray(samples)
    cumulative = (*(float((data <= b).sum()) for b in bounds), float(data.size))
    b = Buckets((*bounds, None), cumulative)
    previous = -math.inf
    for q in (0.5, 0.9, 0.95, 0.99):
        value = bucket_quantile(q, b)
        assert value is not None and value >= previous  # monotone in q
        previous = value
        exact = float(np.quantile(data, q, method="inverted_cdf"))
        i = int(np.searchsorted(bounds, exact))
        lower = bounds[i - 1] if i > 0 else 0.0
        assert lower - 1e-9 <= value <= bounds[i] + 1e-9


@given(
    st.lists(
        st.lists(st.integers(0, 50), min_size=4, max_size=4), min_size=1, max_size=30
    ),
    st.sampled_from([0.0, 0.01, 0.5, 0.95, 0.99, 1.0]),
)
def test_the_vectorised_quantile_is_the_scalar_one_row_by_row(
    increments: list[list[int]], q: float
) -> None:
    # Cumulative rows, some empty, some with everything in the +Inf bucket.
    rows = np.cumsum(np.asarray(increments, dtype=float), axis=1)
    got = bucket_quantiles(q, BOUNDS, rows)
    for row, value in zip(rows, got, strict=True):
        want = bucket_quantile(q, Buckets(BOUNDS, tuple(row)))
        if want is None:
            assert math.isnan(value)
        else:
            assert value == want  # the same arithmetic: equal, not close


def test_the_vectorised_quantile_refuses_what_the_scalar_refuses() -> None:
    with pytest.raises(ValueError):
        bucket_quantiles(1.5, BOUNDS, [[1.0, 2.0, 3.0, 3.0]])
    with pytest.raises(BucketMismatch):
        bucket_quantiles(0.5, (0.1, 0.5, 1.0), [[1.0, 2.0, 3.0]])
    with pytest.raises(BucketMismatch):
        bucket_quantiles(0.5, BOUNDS, [[1.0, 2.0, 3.0]])
    assert np.isnan(bucket_quantiles(0.5, (0.1, 0.5, 1.0), [[0.0, 0.0, 0.0]])).all()
