"""Aggregate an hourly time series to at most N buckets, by kind of figure.

Long ranges would ship every hour to the browser (8 MB for a month of one
deployment's telemetry page); a chart needs at most a couple of thousand points
per trace. How a bucket of hours becomes one point depends on what the figure is:

* amounts and counts (dollars, requests, tokens, GPU-seconds): **summed**;
* unit costs and rates ($ per 1k requests, hit rates): the **ratio of the
  summed numerator and denominator**, never a mean of the hourly ratios (a quiet
  hour at 4 am would weigh as much as the evening peak);
* percentiles: from the **summed histogram bucket increases**
  (``analytics.histograms``), never an average of percentiles;
* gauges (utilisation, KV-cache usage, replicas): the **mean**, with the
  **max** as a band, so a short spike is not averaged away unseen.

A bucket with nothing in it is missing (NaN), never 0: the chart draws a gap.
Buckets are aligned on a grid that starts at the window's start (UTC midnight
for a window of UTC days), so a width that divides a day never straddles two.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from analytics.histograms import bucket_quantiles

MAX_POINTS = 2000
# Bucket widths in steps (hours for hourly data), tried in this order: the
# smallest that fits is used, so 90 days of hours become 2-hour points.
NICE_MULTIPLES = (1, 2, 3, 4, 6, 8, 12, 24, 48, 72, 168, 336, 720)

FloatArray = npt.NDArray[np.float64]
HOUR = pd.Timedelta(hours=1)


@dataclass(frozen=True)
class Grid:
    """``count`` buckets of ``width``, the first starting at ``origin`` (UTC)."""

    origin: pd.Timestamp
    width: pd.Timedelta
    count: int

    def __post_init__(self) -> None:
        if self.width <= pd.Timedelta(0):
            raise ValueError(f"bucket width must be positive, got {self.width}")
        if self.count < 0:
            raise ValueError(f"bucket count must be >= 0, got {self.count}")

    @property
    def starts(self) -> pd.DatetimeIndex:
        return pd.date_range(self.origin, periods=self.count, freq=self.width)

    @property
    def end(self) -> pd.Timestamp:
        return self.origin + self.width * self.count

    def index_of(self, times: Sequence[object] | pd.Series | pd.Index) -> npt.NDArray:
        """The bucket of each time; -1 for a time outside the grid."""
        if isinstance(times, np.ndarray) and times.dtype == np.dtype("M8[ns]"):
            # Naive UTC already (the telemetry reads): skip the index built
            # per call, most of a chart's bucketing.
            origin = self.origin.tz_convert("UTC").tz_localize(None).to_datetime64()
            offset = times - origin
        else:
            stamps = pd.DatetimeIndex(pd.to_datetime(times, utc=True))
            offset = (stamps - self.origin).to_numpy(dtype="timedelta64[ns]")
        width = self.width.to_timedelta64()
        index = np.floor_divide(offset, width).astype(np.int64)
        inside = (index >= 0) & (index < self.count)
        return np.where(inside, index, -1)


def _utc(value: object) -> pd.Timestamp:
    stamp = pd.Timestamp(value)  # type: ignore[arg-type]
    if stamp.tzinfo is None:
        return stamp.tz_localize("UTC")
    return stamp.tz_convert("UTC")


def grid_for(
    start: object,
    end: object,
    *,
    step: pd.Timedelta = HOUR,
    max_points: int = MAX_POINTS,
) -> Grid:
    """The finest grid over ``[start, end)`` with at most ``max_points`` buckets,
    each a whole multiple of ``step`` (a "nice" one where possible)."""
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    origin, last = _utc(start), _utc(end)
    if last <= origin:
        return Grid(origin, step, 0)
    steps = math.ceil((last - origin) / step)
    multiple = next(
        (m for m in NICE_MULTIPLES if math.ceil(steps / m) <= max_points),
        math.ceil(steps / max_points),
    )
    width = step * multiple
    return Grid(origin, width, math.ceil((last - origin) / width))


def _group(grid: Grid, times: object) -> tuple[npt.NDArray, npt.NDArray]:
    index = grid.index_of(times)  # type: ignore[arg-type]
    keep = index >= 0
    return index, keep


def _bucket_sum(
    grid: Grid, index: npt.NDArray, values: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """(sum of the known values, how many are known) per bucket of ``index``
    (rows already inside the grid). numpy, not a pandas groupby: a page
    buckets a few dozen columns and the groupby's overhead was most of it."""
    known = ~np.isnan(values)
    total = np.bincount(
        index, weights=np.where(known, values, 0.0), minlength=grid.count
    )
    count = np.bincount(index, weights=known.astype(float), minlength=grid.count)
    return total.astype(float), count.astype(float)


def sums(
    grid: Grid, times: object, values: pd.DataFrame, *, strict: bool = False
) -> pd.DataFrame:
    """Amounts and counts summed per bucket; NaN where a bucket has no value
    (no row, or only missing ones), never 0. ``strict``: one missing value
    makes its bucket's sum missing (GPU-seconds: a partial sum would read as
    an efficiency gain)."""
    index, keep = _group(grid, times)
    inside = index[keep]
    # One float matrix, not a frame sliced per column: pandas' per-call
    # overhead was most of a page's bucketing.
    matrix = values.to_numpy(dtype=float)[keep]
    rows = np.bincount(inside, minlength=grid.count)
    out: dict[object, FloatArray] = {}
    for j, column in enumerate(values.columns):
        total, known = _bucket_sum(grid, inside, matrix[:, j])
        summed = np.where(known > 0, total, np.nan)
        out[column] = np.where(known < rows, np.nan, summed) if strict else summed
    return pd.DataFrame(out, index=grid.starts, columns=values.columns)


def ratio_of_sums(
    grid: Grid,
    times: object,
    numerator: Sequence[float] | pd.Series,
    denominator: Sequence[float] | pd.Series,
    *,
    scale: float = 1.0,
) -> pd.Series:
    """``scale * sum(numerator) / sum(denominator)`` per bucket, over the rows
    where both are known (a row with one side missing would skew the ratio).
    NaN where nothing is known or the denominator sums to 0."""
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    pairs = np.isfinite(num) & np.isfinite(den)
    frame = pd.DataFrame(
        {"num": np.where(pairs, num, np.nan), "den": np.where(pairs, den, np.nan)}
    )
    summed = sums(grid, times, frame)
    den_sum = summed["den"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = scale * summed["num"].to_numpy() / den_sum
    ratio = np.where(den_sum > 0, ratio, np.nan)
    return pd.Series(ratio, index=grid.starts)


def gauge(
    grid: Grid,
    times: object,
    mean: Sequence[float] | pd.Series,
    maximum: Sequence[float] | pd.Series | None = None,
    *,
    weights: Sequence[float] | pd.Series | None = None,
) -> pd.DataFrame:
    """A gauge per bucket: the (weighted) mean of the hourly means, and the max
    of the hourly maxima (of the means when no maximum is stored)."""
    m = np.asarray(mean, dtype=float)
    hi = m if maximum is None else np.asarray(maximum, dtype=float)
    w = np.ones_like(m) if weights is None else np.asarray(weights, dtype=float)
    known = np.isfinite(m) & np.isfinite(w) & (w > 0)
    index, keep = _group(grid, times)
    inside = index[keep]
    wm, n = _bucket_sum(grid, inside, np.where(known, m * w, np.nan)[keep])
    weight, _ = _bucket_sum(grid, inside, np.where(known, w, np.nan)[keep])
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, wm / weight, np.nan)
    top = np.full(grid.count, np.nan)
    # fmax skips NaN: a bucket keeps NaN only when none of its maxima is known.
    np.fmax.at(top, inside, np.where(np.isfinite(hi), hi, np.nan)[keep])
    return pd.DataFrame({"mean": mean, "max": top}, index=grid.starts)


def _bounds_key(bounds: Sequence[float | None]) -> tuple[float, ...]:
    return tuple(math.inf if b is None else float(b) for b in bounds)


def histogram_quantiles(
    grid: Grid,
    times: object,
    bounds: Sequence[Sequence[float | None]],
    counts: Sequence[Sequence[float]],
    quantiles: Sequence[float] = (0.5, 0.95),
) -> pd.DataFrame:
    """Percentiles per bucket from the hourly cumulative bucket counts summed
    over the bucket's hours, as ``histogram_quantile`` over the whole bucket.

    One column per quantile (``p50``, ``p95``, ...), plus ``count`` (the
    observations). A bucket whose hours carry different bucket bounds cannot
    be summed: its percentiles are NaN, as for a bucket without observations.
    """
    if len(bounds) != len(counts):
        raise ValueError(f"{len(bounds)} bound lists but {len(counts)} count lists")
    index, keep = _group(grid, times)
    by_key: dict[tuple[float, ...], list[int]] = {}
    # Rows usually share one bounds object: convert each object once.
    keys: dict[int, tuple[float, ...]] = {}
    for row, b in enumerate(bounds):
        if keep[row]:
            key = keys.get(id(b))
            if key is None:
                key = keys[id(b)] = _bounds_key(b)
            by_key.setdefault(key, []).append(row)
    columns = [f"p{round(q * 100):g}" for q in quantiles]
    result = np.full((grid.count, len(quantiles)), np.nan)
    observed = np.full(grid.count, np.nan)
    # Which bounds a bucket holds: a second set makes the bucket unaddable.
    holder = np.full(grid.count, -1, dtype=np.int64)
    conflict = np.zeros(grid.count, dtype=bool)
    summed_by_key: list[tuple[tuple[float | None, ...], FloatArray, npt.NDArray]] = []
    for k, (key, rows) in enumerate(by_key.items()):
        matrix = np.asarray([counts[r] for r in rows], dtype=float)
        if matrix.shape[1] != len(key):
            raise ValueError(f"{matrix.shape[1]} counts for {len(key)} bounds")
        total = np.zeros((grid.count, len(key)))
        np.add.at(total, index[rows], matrix)
        present = np.zeros(grid.count, dtype=bool)
        present[index[rows]] = True
        conflict |= present & (holder >= 0)
        holder = np.where(present & (holder < 0), k, holder)
        original = tuple(None if math.isinf(b) else b for b in key)
        summed_by_key.append((original, total, present))
    for k, (original, total, present) in enumerate(summed_by_key):
        buckets = np.flatnonzero(present & (holder == k) & ~conflict)
        if not len(buckets):
            continue
        matrix = total[buckets]
        observed[buckets] = matrix[:, -1] if matrix.shape[1] else 0.0
        for j, q in enumerate(quantiles):
            result[buckets, j] = bucket_quantiles(q, original, matrix)
    out = pd.DataFrame(result, columns=columns, index=grid.starts)
    out["count"] = observed
    return out


def heatmap(
    grid: Grid,
    times: object,
    rows: Sequence[Hashable] | pd.Series,
    values: Sequence[float] | pd.Series,
    *,
    order: Sequence[Hashable] | None = None,
) -> tuple[list[Hashable], FloatArray]:
    """A gauge per (row, bucket) as the mean of its hours: a matrix of
    ``len(order)`` rows by ``grid.count`` columns, NaN where a row has no known
    value in a bucket (a GPU that was not there, or a series it never reports)."""
    keys = pd.Series(list(rows), dtype=object)
    names: list[Hashable] = (
        list(order) if order is not None else list(dict.fromkeys(keys))
    )
    position = {name: i for i, name in enumerate(names)}
    row_index = keys.map(position).to_numpy()
    v = np.asarray(values, dtype=float)
    index, keep = _group(grid, times)
    known = keep & np.isfinite(v) & pd.notna(row_index)
    r = row_index[known].astype(np.int64)
    c = index[known]
    total = np.zeros((len(names), grid.count))
    n = np.zeros((len(names), grid.count))
    np.add.at(total, (r, c), v[known])
    np.add.at(n, (r, c), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix = np.where(n > 0, total / n, np.nan)
    return names, matrix


def max_columns_for(rows: int, *, max_cells: int, max_points: int = MAX_POINTS) -> int:
    """How many time buckets a heatmap of ``rows`` rows may have: at most
    ``max_points``, and ``rows x columns`` at most ``max_cells``."""
    return max(1, min(max_points, max_cells // max(rows, 1)))
