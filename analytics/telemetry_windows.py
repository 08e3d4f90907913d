"""Pure helpers for reading a long window of raw samples in safe pieces.

Prometheus refuses a range query of more than 11,000 points per series and any
query that would load more than ``query.max-samples`` samples. A histogram over
many pods hits the second limit long before the first, so a chunk is sized by
both: ``series x chunk / scrape interval`` samples at most.

Chunks are half-open on the left, ``(a, b]``, in integer milliseconds (the
resolution of Prometheus timestamps); a sample sitting exactly on an edge could
come back from both neighbours (Prometheus 2 range selectors are closed on both
ends), so merging keeps the first copy of each timestamp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Chunk:
    after_ms: int  # exclusive
    until_ms: int  # inclusive

    @property
    def range_ms(self) -> int:
        return self.until_ms - self.after_ms


class BudgetTooSmall(ValueError):
    pass


def chunk_length_ms(
    *,
    series: int,
    interval_s: float,
    max_points: int,
    max_samples: int,
    longest_ms: int,
) -> int:
    """The longest chunk whose raw samples stay within both limits."""
    if interval_s <= 0:
        raise ValueError(f"scrape interval must be positive, got {interval_s}")
    by_points = max_points * interval_s * 1000
    by_samples = max_samples / max(series, 1) * interval_s * 1000
    length = math.floor(min(by_points, by_samples, longest_ms))
    if length < interval_s * 1000:
        raise BudgetTooSmall(
            f"{series} series do not fit a sample budget of {max_samples} "
            f"even for one scrape interval ({interval_s:g} s)"
        )
    return length


def chunks(after_ms: int, until_ms: int, length_ms: int) -> list[Chunk]:
    """Contiguous ``(a, b]`` chunks covering ``(after_ms, until_ms]``."""
    if length_ms <= 0:
        raise ValueError(f"chunk length must be positive, got {length_ms}")
    out: list[Chunk] = []
    a = after_ms
    while a < until_ms:
        b = min(a + length_ms, until_ms)
        out.append(Chunk(a, b))
        a = b
    return out


def samples_estimate(*, series: int, range_ms: int, interval_s: float) -> int:
    """Samples a range selector loads: one per scrape per series, plus the edge."""
    return series * (int(range_ms / (interval_s * 1000)) + 1)


def pack(counts: dict[str, int], limit: int) -> list[list[str]]:
    """Group names so that each group has at most ``limit`` series (a name with
    more than ``limit`` series gets a group of its own)."""
    groups: list[list[str]] = []
    current: list[str] = []
    total = 0
    for name in sorted(counts, key=lambda n: (-counts[n], n)):
        n = counts[name]
        if current and total + n > limit:
            groups.append(current)
            current, total = [], 0
        current.append(name)
        total += n
    if current:
        groups.append(current)
    return groups


def merge_samples(
    parts: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]],
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate chunk results of one series; sort; drop repeated timestamps.

    A series read in one chunk is returned as it came (not copied)."""
    if not parts:
        return np.empty(0), np.empty(0)
    if len(parts) == 1:
        t, v = (np.asarray(x, dtype=float) for x in parts[0])
    else:
        t = np.concatenate([np.asarray(p[0], dtype=float) for p in parts])
        v = np.concatenate([np.asarray(p[1], dtype=float) for p in parts])
    if t.size < 2 or bool(np.all(t[1:] > t[:-1])):
        # The usual case (chunks in order, no edge sample twice): no sort.
        return t, v
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    keep = np.ones(t.size, dtype=bool)
    keep[1:] = t[1:] != t[:-1]
    return t[keep], v[keep]


def scrape_interval(series_times: Sequence[npt.ArrayLike], default: float) -> float:
    """Median spacing of samples across series (scrape interval as observed).

    Exactly ``np.median`` of every series' positive spacings, end to end. The
    series of one scrape share their timestamps (a deployment's ~90 series
    hold a few distinct arrays), so each distinct array's spacings are taken
    once and weighted by the series that hold it: concatenating them all and
    partitioning was a fifth of the records' CPU in a backfill
    (docs/benchmarks.md).
    """
    distinct: list[np.ndarray] = []
    holders: list[int] = []
    by_ends: dict[tuple[int, float, float], list[int]] = {}
    for times in series_times:
        t = np.asarray(times, dtype=float)
        if t.size < 2:
            continue
        same_ends = by_ends.setdefault((t.size, float(t[0]), float(t[-1])), [])
        for i in same_ends:
            if np.array_equal(distinct[i], t):
                holders[i] += 1
                break
        else:
            same_ends.append(len(distinct))
            distinct.append(t)
            holders.append(1)
    if not distinct:
        return default
    spacings = np.concatenate([np.diff(t) for t in distinct])
    weights = np.repeat(holders, [t.size - 1 for t in distinct])
    positive = spacings > 0
    spacings, weights = spacings[positive], weights[positive]
    if spacings.size == 0:
        return default
    order = np.argsort(spacings, kind="stable")
    spacings, ends = spacings[order], np.cumsum(weights[order])
    # The k-th of all the spacings in order is the first distinct one whose
    # running count of holders passes k; np.median takes the middle one, or
    # the mean of the middle two.
    n = int(ends[-1])
    middle = spacings[np.searchsorted(ends, [(n - 1) // 2, n // 2], side="right")]
    return float(np.mean(middle)) if n % 2 == 0 else float(middle[0])


def slot_totals(
    series: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]], interval_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Across series, per scrape slot: (slot time s, sum, max, number of series).

    Gauges of several replicas are scraped at slightly different instants; a
    slot groups the samples of one scrape round so that "running requests of
    the deployment" is the sum over replicas at one moment.
    """
    if not series:
        empty = np.empty(0)
        return empty, empty, empty, empty
    t = np.concatenate([np.asarray(s[0], dtype=float) for s in series])
    v = np.concatenate([np.asarray(s[1], dtype=float) for s in series])
    slots = np.round(t / interval_s).astype(np.int64)
    unique, index = np.unique(slots, return_inverse=True)
    sums = np.bincount(index, weights=v, minlength=unique.size)
    counts = np.bincount(index, minlength=unique.size).astype(float)
    maxes = np.full(unique.size, -np.inf)
    np.maximum.at(maxes, index, v)
    # The slot's time is its earliest sample, so a slot never moves a sample
    # into the next hour.
    times = np.full(unique.size, np.inf)
    np.minimum.at(times, index, t)
    return times, sums, maxes, counts
