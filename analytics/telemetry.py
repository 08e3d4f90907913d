"""Pure helpers for turning raw Prometheus samples into hourly figures.

Counters are read from raw samples, not from PromQL ``increase()``, so hourly
counts are exact: ``increase`` extrapolates to the window edges.

Rules (docs/telemetry.md):

* A sample lower than its predecessor is a counter reset (the pod restarted):
  the increase is the new value itself, as Prometheus's ``rate`` assumes.
* An increase belongs to the hour of the sample that shows it. After a scrape
  gap the whole jump therefore lands in the first hour with samples again; the
  hours inside the gap have no samples and stay missing, never zero.
* The first sample of a series only sets the baseline, unless the caller knows
  the series was born inside the window (``born_in_window``), in which case the
  counter started from zero.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

HOUR_S = 3600


def counter_increases(
    values: npt.ArrayLike, *, born_in_window: bool = False
) -> np.ndarray:
    """Per-sample increases of a counter, reset-aware.

    ``out[i]`` is the increase observed at sample ``i`` (0 for the first one
    unless ``born_in_window``).
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return v
    out = np.empty_like(v)
    out[0] = v[0] if born_in_window else 0.0
    delta = np.diff(v)
    out[1:] = np.where(delta >= 0, delta, v[1:])
    return out


def hourly_counter_increases(
    timestamps_s: npt.ArrayLike, values: npt.ArrayLike, *, born_in_window: bool = False
) -> dict[int, float]:
    """Sum of reset-aware increases per UTC hour (epoch seconds of the hour start).

    Only hours that hold at least one sample appear in the result.
    """
    t = np.asarray(timestamps_s, dtype=float)
    if t.size == 0:
        return {}
    order = np.argsort(t, kind="stable")
    t = t[order]
    inc = counter_increases(
        np.asarray(values, dtype=float)[order], born_in_window=born_in_window
    )
    hours = (np.floor(t / HOUR_S) * HOUR_S).astype(np.int64)
    unique_hours, index = np.unique(hours, return_inverse=True)
    sums = np.bincount(index, weights=inc, minlength=unique_hours.size)
    return {int(h): float(s) for h, s in zip(unique_hours, sums, strict=True)}


def hourly_gauge_stats(
    timestamps_s: npt.ArrayLike, values: npt.ArrayLike
) -> dict[int, tuple[float, float, int]]:
    """Per UTC hour: (mean, max, number of samples) of a gauge."""
    t = np.asarray(timestamps_s, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.size == 0:
        return {}
    hours = (np.floor(t / HOUR_S) * HOUR_S).astype(np.int64)
    unique_hours, index = np.unique(hours, return_inverse=True)
    counts = np.bincount(index, minlength=unique_hours.size)
    sums = np.bincount(index, weights=v, minlength=unique_hours.size)
    maxes = np.full(unique_hours.size, -np.inf)
    np.maximum.at(maxes, index, v)
    return {
        int(h): (float(s / c), float(m), int(c))
        for h, s, m, c in zip(unique_hours, sums, maxes, counts, strict=True)
    }
