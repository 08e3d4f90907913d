"""Percentiles from Prometheus-style cumulative histogram buckets.

Latency is stored as hourly bucket increases because percentiles cannot be
re-aggregated; buckets can. Sum the buckets over the hours (or deployments) you
want, then ask for a percentile, exactly as PromQL's ``histogram_quantile``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


class BucketMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Buckets:
    """Cumulative counts per upper bound; the last bound is +Inf (None)."""

    bounds: tuple[float | None, ...]
    cumulative: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative):
            raise BucketMismatch(
                f"{len(self.bounds)} bounds but {len(self.cumulative)} counts"
            )

    @property
    def count(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0


def _bounds_key(bounds: Sequence[float | None]) -> tuple[float, ...]:
    return tuple(math.inf if b is None else float(b) for b in bounds)


def buckets_sum(
    items: Iterable[tuple[Sequence[float | None], Sequence[float]]],
) -> Buckets | None:
    """Add histograms with the same bounds; None when there is nothing to add."""
    bounds: tuple[float | None, ...] | None = None
    key: tuple[float, ...] = ()
    totals: list[float] = []
    for item_bounds, counts in items:
        if bounds is None:
            bounds = tuple(item_bounds)
            key = _bounds_key(item_bounds)
            totals = [0.0] * len(bounds)
        elif _bounds_key(item_bounds) != key:
            raise BucketMismatch(
                "histograms with different bucket bounds cannot be added: "
                f"{list(bounds)} vs {list(item_bounds)}"
            )
        if len(counts) != len(totals):
            raise BucketMismatch(f"{len(counts)} counts for {len(totals)} bounds")
        for i, c in enumerate(counts):
            totals[i] += float(c)
    if bounds is None:
        return None
    return Buckets(bounds, tuple(totals))


def bucket_quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile (0..1) as ``histogram_quantile`` computes it.

    Linear interpolation inside the bucket that holds the rank; the first
    bucket starts at 0; a rank in the +Inf bucket returns the highest finite
    bound (the histogram cannot say more). None when there are no observations:
    missing is not zero.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within 0..1, got {q}")
    bounds = _bounds_key(buckets.bounds)
    counts = buckets.cumulative
    if not counts or counts[-1] <= 0:
        return None
    if bounds[-1] != math.inf:
        raise BucketMismatch("the last bucket must be +Inf")
    rank = q * counts[-1]
    for i, (upper, cumulative) in enumerate(zip(bounds, counts, strict=True)):
        if cumulative >= rank:
            if upper == math.inf:
                return bounds[-2] if len(bounds) > 1 else None
            lower = bounds[i - 1] if i > 0 else 0.0
            below = counts[i - 1] if i > 0 else 0.0
            in_bucket = cumulative - below
            if in_bucket <= 0:
                return upper
            return lower + (upper - lower) * (rank - below) / in_bucket
    return bounds[-2] if len(bounds) > 1 else None


def bucket_quantiles(
    q: float, bounds: Sequence[float | None], cumulative: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """``bucket_quantile`` of every row of ``cumulative`` (rows of cumulative
    counts on the same ``bounds``) at once, with the same arithmetic in the
    same order, so each value is the one the scalar function returns; NaN
    where it returns None."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within 0..1, got {q}")
    counts = np.asarray(cumulative, dtype=float)
    if counts.ndim != 2 or counts.shape[1] != len(bounds):
        raise BucketMismatch(f"{counts.shape} counts for {len(bounds)} bounds")
    out = np.full(counts.shape[0], np.nan)
    if not counts.shape[0] or not counts.shape[1]:
        return out
    upper_bounds = np.asarray(_bounds_key(bounds), dtype=float)
    total = counts[:, -1]
    observed = ~(total <= 0)  # as the scalar: only a count <= 0 is no count
    if not observed.any():
        return out
    if upper_bounds[-1] != math.inf:
        raise BucketMismatch("the last bucket must be +Inf")
    highest = upper_bounds[-2] if len(upper_bounds) > 1 else np.nan
    rank = q * total
    reached = counts >= rank[:, None]
    found = reached.any(axis=1)
    i = np.argmax(reached, axis=1)
    rows = np.arange(counts.shape[0])
    upper = upper_bounds[i]
    lower = np.where(i > 0, upper_bounds[i - 1], 0.0)
    below = np.where(i > 0, counts[rows, i - 1], 0.0)
    in_bucket = counts[rows, i] - below
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = lower + (upper - lower) * (rank - below) / in_bucket
    value = np.where(in_bucket <= 0, upper, inside)
    value = np.where(np.isinf(upper) | ~found, highest, value)
    return np.where(observed, value, np.nan)
