"""Chunk sizing and edge de-duplication (pure)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.telemetry_windows import (
    BudgetTooSmall,
    chunk_length_ms,
    chunks,
    merge_samples,
    pack,
    samples_estimate,
    scrape_interval,
)
from costapp.sources.engines import VLLM


@given(
    series=st.integers(1, 5000),
    interval=st.sampled_from([1.0, 5.0, 15.0, 30.0, 60.0]),
    budget=st.integers(10_000, 50_000_000),
    hours=st.integers(1, 24 * 31),
)
def test_no_chunk_exceeds_the_point_limit_or_the_sample_budget(
    series: int, interval: float, budget: int, hours: int
) -> None:
    longest = hours * 3_600_000
    try:
        length = chunk_length_ms(
            series=series,
            interval_s=interval,
            max_points=10_999,
            max_samples=budget - series,
            longest_ms=longest,
        )
    except BudgetTooSmall:
        assert series * 2 > budget - series
        return
    parts = chunks(0, longest, length)
    assert parts[0].after_ms == 0 and parts[-1].until_ms == longest
    for a, b in itertools.pairwise(parts):
        assert a.until_ms == b.after_ms  # contiguous, no hole, no overlap
    for c in parts:
        per_series = samples_estimate(
            series=1, range_ms=c.range_ms, interval_s=interval
        )
        assert per_series <= 11_000
        assert per_series * series <= budget


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=300), st.integers(1, 50))
def test_merging_overlapping_chunks_keeps_each_timestamp_once(
    times: list[int], cut: int
) -> None:
    t = np.array(sorted(set(times)), dtype=float)
    v = t * 2
    # Two chunks sharing their edge sample, as closed range selectors return.
    k = min(cut, t.size - 1)
    mt, mv = merge_samples([(t[: k + 1], v[: k + 1]), (t[k:], v[k:])])
    assert mt.tolist() == t.tolist()
    assert mv.tolist() == v.tolist()


def test_names_are_packed_without_splitting_a_name() -> None:
    groups = pack({"a": 10, "b": 5, "c": 5, "d": 30}, 15)
    assert sorted(n for g in groups for n in g) == ["a", "b", "c", "d"]
    assert ["d"] in groups
    with pytest.raises(ValueError):
        chunks(0, 10, 0)


def test_the_engine_decides_which_names_are_queried_old_and_new() -> None:
    names = VLLM.names()
    assert "vllm:kv_cache_usage_perc" in names and "vllm:gpu_cache_usage_perc" in names
    assert "vllm:inter_token_latency_seconds_bucket" in names
    assert "vllm:time_per_output_token_seconds_bucket" in names
    assert VLLM.generation(["vllm:kv_cache_usage_perc"]) == "v1"


def median_of_all_spacings(series_times: list[np.ndarray], default: float) -> float:
    # scrape_interval as it was: every series' spacings end to end.
    diffs = [np.diff(np.asarray(t, dtype=float)) for t in series_times]
    flat = np.concatenate(diffs) if diffs else np.empty(0)
    flat = flat[flat > 0]
    return float(np.median(flat)) if flat.size else default


def cumulative(steps: list[float]) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf + -inf
        return np.cumsum(np.asarray(steps, dtype=float))


scrape_times = st.lists(
    st.sampled_from(
        [0.0, 0.5, 1.0, 14.999, 15.0, 15.001, 1e9, np.nan, np.inf, -np.inf]
    ),
    max_size=12,
).map(cumulative)


@given(
    distinct=st.lists(scrape_times, min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 3), max_size=12),
)
def test_the_scrape_interval_is_the_median_of_every_series_spacings(
    distinct: list[np.ndarray], picks: list[int]
) -> None:
    # Series sharing their timestamps (each distinct array taken once and
    # weighted) give exactly the median of all the spacings end to end.
    series = [distinct[i % len(distinct)].copy() for i in picks]
    with np.errstate(invalid="ignore"):  # inf - inf in the spacings
        got = scrape_interval(series, 60.0)
        want = median_of_all_spacings(series, 60.0)
    assert got == want or (np.isnan(got) and np.isnan(want))
