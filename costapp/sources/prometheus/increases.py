"""Hourly counter increases in one compiled pass (numba), for records.py.

Imported on first use, as ``values_parser`` is, so that processes that never
build records do not load numba. ``np.bincount`` over
``counter_increases``' array took ~60 us a series (five numpy passes and the
calls between them), the main part of the records' CPU in a backfill
(docs/benchmarks.md); this loop takes ~10.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def hourly_increases(
    values: np.ndarray, first: np.ndarray, counts: np.ndarray, born: bool
) -> np.ndarray:
    """Per run of samples (``counts[k]`` from ``first[k]``, the runs end to
    end), the sum of the counter's reset-aware increases.

    Bit for bit ``np.bincount(run_of_each_sample, weights=counter_increases(
    values, born_in_window=born))``: each increase is the same float (the
    difference, or the value itself after a reset; the first sample's is its
    value when born, else 0), and bincount adds them one by one in order
    from 0.0, as here.
    """
    out = np.zeros(first.size)
    for k in range(first.size):
        total = 0.0
        for i in range(first[k], first[k] + counts[k]):
            if i == 0:
                total += values[0] if born else 0.0
                continue
            delta = values[i] - values[i - 1]
            # NaN compares false, as in np.where(delta >= 0, ...).
            total += delta if delta >= 0 else values[i]
        out[k] = total
    return out
