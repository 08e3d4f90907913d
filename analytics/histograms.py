"""Percentiles from Prometheus-style cumulative histogram buckets.

Latency is stored as hourly bucket increases because percentiles cannot be
re-aggregated; buckets can. Sum the buckets over the hours (or deployments) you
want, then ask for a percentile, exactly as PromQL's ``histogram_quantile``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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
