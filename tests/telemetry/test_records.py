"""Hourly records from raw samples (pure: no HTTP, no database)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.telemetry import counter_increases
from costapp.sources.base import DeploymentHourRecord
from costapp.sources.prometheus import Target
from costapp.sources.prometheus.compiled import hourly_increases
from costapp.sources.prometheus.reader import RawSeries
from costapp.sources.prometheus.records import CounterState, deployment_records

T0 = 1_709_510_400  # 2024-03-04 00:00 UTC
HOUR = 3600
HOURS = 6
TARGET = Target("chat", "vllm", 'namespace="chat"', gpu_share=2.0)


def series(name: str, hours: set[int], value: float) -> RawSeries:
    """One pod's samples every 60 s (7 s past the minute) in the given hours."""
    t = np.array(
        [T0 + h * HOUR + m * 60 + 7 for h in sorted(hours) for m in range(60)],
        dtype=float,
    )
    v = (
        np.cumsum(np.full(t.size, value))
        if name.endswith("_total")
        else np.full(t.size, value)
    )
    return RawSeries({"__name__": name, "pod": "p0", "finished_reason": "stop"}, t, v)


def records(
    running: set[int], device_seconds: dict[int, float] | None = None
) -> dict[int, DeploymentHourRecord]:
    found = [series("vllm:request_success_total", set(range(HOURS)), 2.0)]
    if running:
        found.append(series("vllm:num_requests_running", running, 3.0))
    out = deployment_records(
        target=TARGET,
        series=found,
        born=lambda labels: False,
        state=CounterState(),
        slice_start_s=T0,
        slice_end_s=T0 + HOURS * HOUR,
        interval_default=60.0,
        device_seconds=device_seconds,
    )
    return {
        int(r.hour.timestamp() - T0) // HOUR: r
        for r in out
        if isinstance(r, DeploymentHourRecord)
    }


@given(st.sets(st.integers(0, HOURS - 1)))
def test_without_dcgm_an_hour_without_a_replica_count_has_unknown_gpu_seconds(
    running: set[int],
) -> None:
    by_hour = records(running)
    assert set(by_hour) == set(range(HOURS))  # requests were seen every hour
    for h, r in by_hour.items():
        if h in running:
            assert r.gpu_seconds == HOUR * TARGET.gpu_share  # one replica, all hour
            assert r.replicas_mean == 1.0 and r.replicas_max == 1.0
        else:
            assert r.gpu_seconds is None  # unknown, never 0
            assert r.replicas_mean is None and r.replicas_max is None


@given(
    st.sets(st.integers(0, HOURS - 1)),
    st.dictionaries(st.integers(0, HOURS - 1), st.floats(0, 1e6), max_size=HOURS),
)
def test_with_dcgm_an_hour_without_dcgm_samples_has_unknown_gpu_seconds(
    running: set[int], measured: dict[int, float]
) -> None:
    """The replica count never stands in for DCGM: a DCGM selector that matched
    nothing in an hour leaves it unknown."""
    by_hour = records(running, {T0 + h * HOUR: x for h, x in measured.items()})
    for h, r in by_hour.items():
        assert r.gpu_seconds == measured.get(h)


counter_values = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(0, 10**6).map(float),
        st.sampled_from([0.0, -0.0, 1e16, 1e16 + 2]),
    ),
    min_size=1,
    max_size=60,
)


@given(values=counter_values, cuts=st.lists(st.integers(1, 59)), born=st.booleans())
def test_compiled_hourly_increases_are_bincount_of_counter_increases(
    values: list[float], cuts: list[int], born: bool
) -> None:
    # Resets, NaN, inf, -0.0 and sums that round: the same floats added in
    # the same order as np.bincount does, bit for bit.
    v = np.array(values)
    first = np.array(sorted({0, *(c for c in cuts if c < v.size)}))
    counts = np.diff(np.append(first, v.size))
    run_of_sample = np.repeat(np.arange(first.size), counts)
    want = np.bincount(run_of_sample, weights=counter_increases(v, born_in_window=born))
    got = hourly_increases(v, first, counts, born)
    assert got.tobytes() == want.tobytes()


def test_without_a_writable_cache_the_loops_are_compiled_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # numba refuses cache=True when no place is writable (read-only code,
    # a user without a home): compiled per process rather than not at all.
    from numba.core import caching

    from costapp.sources.prometheus import compiled

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])

    def add_one(x: int) -> int:
        return x + 1

    assert compiled._compiled()(add_one)(1) == 2
