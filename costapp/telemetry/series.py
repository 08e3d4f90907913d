"""Reads of stored telemetry as chart series, aggregated on the server.

Rows are read once per window and handed to ``analytics.downsample``, so no
trace of any chart holds more than ``MAX_POINTS`` points however long the
window: counts summed, rates as ratios of sums, percentiles from summed bucket
increases, gauges as mean with a max band. A bucket (or heatmap cell) nothing
was measured in is NaN, which charts draw as a gap, never as 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd
from django.db import connections
from django.db.models import Avg, Q, QuerySet, TextField, Value
from django.db.models.functions import Cast, Floor

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
from analytics.prompt_costs import prefill_decode_seconds
from costapp.models import Deployment, DeploymentHour, DeviceHour, HistogramHour
from costapp.models.functions import Epoch
from costapp.models.rollups import (
    ROLLUP_FIELDS,
    ROLLUP_MAXIMA,
    ROLLUP_STRICT,
    ROLLUP_SUMS,
)

LATENCY = ("ttft", "itl", "e2e", "prefill", "decode")
# A heatmap layer holds at most this many cells: 96 GPUs over 90 days would
# otherwise be 200,000 numbers per layer.
HEATMAP_CELLS = 24_000

HOUR_FIELDS = (
    "hour", "requests_stop", "requests_length", "requests_aborted",
    "prompt_tokens", "generation_tokens", "replicas_mean", "replicas_max",
    "gpu_seconds", "kv_cache_usage_mean", "kv_cache_usage_max", "running_mean",
    "running_max", "waiting_mean", "waiting_max", "preemptions",
    "prefix_cache_queries", "prefix_cache_hits", "counts_exact",
)  # fmt: skip


@dataclass(frozen=True)
class Series:
    """One deployment's telemetry over a window, bucketed on ``grid``.

    ``frame`` is indexed by bucket start (UTC) with one column per figure;
    ``hours`` counts the stored hours in each bucket (0: nothing measured).
    """

    grid: Grid
    frame: pd.DataFrame
    latency: dict[str, pd.DataFrame]  # metric -> p50, p95, p99, count
    measured: frozenset[str]  # figures with at least one stored value

    @property
    def empty(self) -> bool:
        return bool((self.frame["hours"] == 0).all()) if len(self.frame) else True


TABLE_ROWS = 100


def table_grid(start: datetime, end: datetime) -> Grid:
    """The telemetry page's table: hours up to four days, UTC days up to
    ``TABLE_ROWS`` days, whole groups of days beyond (never every hour of a
    long window)."""
    if end - start <= pd.Timedelta(days=4):
        return grid_for(start, end, max_points=96)
    return grid_for(start, end, step=pd.Timedelta(days=1), max_points=TABLE_ROWS)


def _within(ranges: Sequence[tuple[datetime, datetime]]) -> Q:
    """Hours in any of ``ranges`` (half-open, UTC); none: no hour."""
    q = Q(pk__in=[])
    for a, b in ranges:
        q |= Q(hour__gte=a, hour__lt=b)
    return q


def _hours_frame(
    deployment: Deployment | int, ranges: Sequence[tuple[datetime, datetime]]
) -> pd.DataFrame:
    rows = _fetch(
        DeploymentHour.objects.filter(_within(ranges), deployment=deployment).annotate(
            epoch=Epoch("hour")
        ),
        ["epoch", *HOUR_FIELDS[1:]],
    )
    frame = pd.DataFrame.from_records(rows, columns=list(HOUR_FIELDS))
    frame["hour"] = _from_epoch(frame["hour"])
    numeric = [c for c in HOUR_FIELDS if c not in ("hour", "counts_exact")]
    frame[numeric] = frame[numeric].astype(float)
    return frame


def _fetch(qs: QuerySet[Any], names: list[str]) -> list[tuple[Any, ...]]:
    """``qs.values_list(*names)`` straight from the cursor: the SQL is the
    ORM's, but rows skip its per-value converters (a third of a 90-day page's
    read). Every name is a float, text or boolean column or annotation, which
    the driver already returns as Python values."""
    query = qs.values_list(*names).query
    sql, params = query.get_compiler(using=qs.db).as_sql()
    with connections[qs.db].cursor() as cursor:
        cursor.execute(sql, params)
        columns = [c[0] for c in cursor.description]
        rows = cursor.fetchall()
    order = [columns.index(n) for n in names]
    if order == list(range(len(columns))):
        return rows
    return list(map(itemgetter(*order), rows))


def _from_epoch(seconds: object) -> np.ndarray:
    """Whole seconds since 1970 as naive UTC datetime64[ns]: the database
    sends a float, which parses far faster than a timestamp with a zone."""
    whole = np.rint(np.asarray(seconds, dtype=float)).astype(np.int64)
    return (whole * 1_000_000_000).astype("datetime64[ns]")


@dataclass(frozen=True)
class Histograms:
    """One metric's stored hours: bucket bounds per hour (one list object per
    distinct set of bounds, as stored), cumulative counts and sums."""

    times: np.ndarray  # datetime64[ns], UTC
    bounds: list[list[float | None]]
    counts: Sequence[Sequence[float]]  # lists as stored; arrays once bucketed
    sums: list[float]


@dataclass(frozen=True)
class Raw:
    """The stored rows of one deployment and window, read once and bucketed
    on as many grids as a page needs."""

    start: datetime
    end: datetime
    # One row per stored hour or per stored rollup: ``t`` (naive UTC
    # datetime64) and the additive columns of ``prepare``.
    prepared: pd.DataFrame
    histograms: dict[str, Histograms]


def raw_read(
    deployment: Deployment | int,
    *,
    start: datetime,
    end: datetime,
    metrics: Sequence[str] = LATENCY,
    ranges: Sequence[tuple[datetime, datetime]] | None = None,
) -> Raw:
    """Hours and histograms of the window (of ``ranges`` in it, if given).
    The JSON arrays come as text and are decoded in one pass per metric (a
    decoder call per row and column was most of a 90-day page); bounds are
    decoded once per distinct set."""
    ranges = [(start, end)] if ranges is None else ranges
    histograms = histograms_decode(
        _fetch(
            HistogramHour.objects.filter(
                _within(ranges), deployment=deployment, metric__in=metrics
            )
            .annotate(
                epoch=Epoch("hour"),
                bounds_text=Cast("bounds", TextField()),
                counts_text=Cast("cumulative_counts", TextField()),
            )
            .order_by("metric", "hour"),
            ["metric", "epoch", "bounds_text", "counts_text", "total_sum"],
        ),
        metrics,
    )
    return Raw(start, end, prepare(_hours_frame(deployment, ranges)), histograms)


def histograms_decode(
    rows: Sequence[tuple[Any, ...]], metrics: Sequence[str]
) -> dict[str, Histograms]:
    """(metric, epoch seconds, bounds JSON, counts JSON, sum) rows, ordered by
    metric, as one ``Histograms`` per metric."""
    grouped: dict[str, tuple[list, list, list, list]] = {}
    for metric, hour, bounds, counts, total in rows:
        into = grouped.setdefault(metric, ([], [], [], []))
        into[0].append(hour)
        into[1].append(bounds)
        into[2].append(counts)
        into[3].append(total)
    histograms: dict[str, Histograms] = {}
    for metric in metrics:
        times, bounds, counts, totals = grouped.get(metric, ([], [], [], []))
        decoded = {text: json.loads(text) for text in set(bounds)}
        histograms[metric] = Histograms(
            times=_from_epoch(times),
            bounds=[decoded[text] for text in bounds],
            counts=json.loads(f"[{','.join(counts)}]"),
            sums=totals,
        )
    return histograms


GAUGES = ("replicas", "kv_cache_usage", "running", "waiting")
COUNTED = (
    "requests", "requests_stop", "requests_length", "requests_aborted",
    "prompt_tokens", "generation_tokens", "preemptions", "hours", "extrapolated",
)  # fmt: skip


def _nan_unless(mask: object, values: pd.Series) -> np.ndarray:
    return np.where(np.asarray(mask, dtype=bool), values.to_numpy(float), np.nan)


def prepare(h: pd.DataFrame) -> pd.DataFrame:
    """The stored hours as additive rows (``ROLLUP_FIELDS``): what the charts
    sum per bucket, so that rows summed per two hours (a stored rollup) and
    summed again give what the hours give. Ratios keep both sides over the
    hours where both are known; gauges keep the sum and number of the known
    hourly means and their maximum; unknown stays NaN, never 0."""
    requests = h["requests_stop"] + h["requests_length"]
    tokens = h["prompt_tokens"] + h["generation_tokens"]
    gpu = h["gpu_seconds"]
    hits, queries, pre = (
        h["prefix_cache_hits"],
        h["prefix_cache_queries"],
        h["preemptions"],
    )
    prefix_known = hits.notna() & queries.notna()
    out = {
        "t": h["hour"].to_numpy(dtype="datetime64[ns]"),
        "hours": np.ones(len(h)),
        "extrapolated": (~h["counts_exact"].astype(bool)).astype(float).to_numpy(),
        "requests": requests.to_numpy(float),
        "requests_stop": h["requests_stop"].to_numpy(float),
        "requests_length": h["requests_length"].to_numpy(float),
        "requests_aborted": h["requests_aborted"].to_numpy(float),
        "prompt_tokens": h["prompt_tokens"].to_numpy(float),
        "generation_tokens": h["generation_tokens"].to_numpy(float),
        "preemptions": pre.to_numpy(float),
        "gpu_unknown": gpu.isna().astype(float).to_numpy(),
        "hits_paired": _nan_unless(prefix_known, hits),
        "queries_paired": _nan_unless(prefix_known, queries),
        "preemptions_paired": _nan_unless(pre.notna() & requests.notna(), pre),
        "requests_paired": _nan_unless(pre.notna() & requests.notna(), requests),
        "tokens_paired": _nan_unless(tokens.notna() & gpu.notna(), tokens),
        "gpu_paired": _nan_unless(tokens.notna() & gpu.notna(), gpu),
        "gpu_seconds": gpu.to_numpy(float),
    }
    for name in GAUGES:
        mean = h[f"{name}_mean"].to_numpy(float)
        known = np.isfinite(mean)
        out[f"{name}_sum"] = np.where(known, mean, np.nan)
        out[f"{name}_n"] = known.astype(float)
        out[f"{name}_max"] = h[f"{name}_max"].to_numpy(float)
    return pd.DataFrame(out, columns=["t", *ROLLUP_FIELDS])


def rollup(prepared: pd.DataFrame, grid: Grid) -> pd.DataFrame:
    """``prepared`` rows summed per bucket of ``grid`` (buckets without a row
    left out): prepared rows again, one per bucket."""
    t = prepared["t"].to_numpy(dtype="datetime64[ns]")
    summed = sums(grid, t, prepared[list(ROLLUP_SUMS)])
    strict = sums(grid, t, prepared[list(ROLLUP_STRICT)], strict=True)
    index = grid.index_of(t)
    keep = index >= 0
    out = pd.concat([summed, strict], axis=1)
    for column in ROLLUP_MAXIMA:
        top = np.full(grid.count, np.nan)
        values = prepared[column].to_numpy(float)
        np.fmax.at(top, index[keep], values[keep])
        out[column] = top
    out = out[list(ROLLUP_FIELDS)]
    out.insert(0, "t", grid.starts.tz_localize(None).to_numpy())
    return out[out["hours"].fillna(0.0) > 0].reset_index(drop=True)


def _utc_array(times: object) -> np.ndarray:
    """Times as naive UTC datetime64[ns]: what ``analytics.downsample`` turns
    into buckets fastest (a pandas datetime Series is iterated element by
    element on every call)."""
    return (
        pd.DatetimeIndex(pd.to_datetime(times, utc=True)).tz_localize(None).to_numpy()
    )


def _bucketed(grid: Grid, h: Histograms) -> Histograms:
    """The hours summed per bucket of ``grid`` and set of bounds: what
    ``histogram_quantiles`` would sum itself, in one numpy pass per set."""
    index = grid.index_of(h.times)
    by_bounds: dict[int, list[int]] = {}
    for row, b in enumerate(h.bounds):
        if index[row] >= 0:
            by_bounds.setdefault(id(b), []).append(row)
    times: list[np.ndarray] = []
    bounds: list[list[float | None]] = []
    counts: list[np.ndarray] = []
    starts = grid.starts.tz_localize(None).to_numpy()
    for rows in by_bounds.values():
        width = {len(h.counts[r]) for r in rows}
        if width != {len(h.bounds[rows[0]])}:
            # Counts that do not fit their bounds: as stored, for
            # ``histogram_quantiles`` to refuse.
            return h
        matrix = np.asarray([h.counts[r] for r in rows], dtype=float)
        total = np.zeros((grid.count, matrix.shape[1]))
        np.add.at(total, index[rows], matrix)
        present = np.unique(index[rows])
        times.append(starts[present])
        bounds.extend([h.bounds[rows[0]]] * len(present))
        counts.extend(total[present])
    return Histograms(
        times=np.concatenate(times) if times else starts[:0],
        bounds=bounds,
        counts=counts,  # type: ignore[arg-type]  # rows of floats, as arrays
        sums=[],
    )


def series_read(
    deployment: Deployment,
    *,
    start: datetime,
    end: datetime,
    grid: Grid | None = None,
    max_points: int = MAX_POINTS,
) -> Series:
    """Every figure the telemetry charts draw, bucketed (at most
    ``max_points`` buckets unless ``grid`` is given)."""
    raw = raw_read(deployment, start=start, end=end)
    return series_bucket(raw, grid or grid_for(start, end, max_points=max_points))


def series_bucket(
    raw: Raw, grid: Grid, quantiles: Sequence[float] = (0.5, 0.95, 0.99)
) -> Series:
    p = raw.prepared
    # Naive UTC datetime64: what ``analytics.downsample`` buckets fastest; a
    # datetime Series is converted element by element.
    t = p["t"].to_numpy(dtype="datetime64[ns]")
    counted = sums(grid, t, p[list(COUNTED)])
    gpu = sums(grid, t, p[["gpu_seconds"]], strict=True)
    frame = counted.assign(
        hours=counted["hours"].fillna(0.0),
        gpu_seconds=gpu["gpu_seconds"],
        gpu_unknown=sums(grid, t, p[["gpu_unknown"]])["gpu_unknown"],
        prefix_hit_rate=ratio_of_sums(grid, t, p["hits_paired"], p["queries_paired"]),
        preemptions_per_1k=ratio_of_sums(
            grid, t, p["preemptions_paired"], p["requests_paired"], scale=1000.0
        ),
        tokens_per_gpu_second=ratio_of_sums(
            grid, t, p["tokens_paired"], p["gpu_paired"]
        ),
    )
    for name in GAUGES:
        n = p[f"{name}_n"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = p[f"{name}_sum"].to_numpy(float) / n
        g = gauge(grid, t, mean, p[f"{name}_max"], weights=np.nan_to_num(n))
        frame[f"{name}_mean"] = g["mean"]
        frame[f"{name}_max"] = g["max"]
    latency: dict[str, pd.DataFrame] = {}
    for metric in LATENCY:
        if metric not in raw.histograms:
            continue
        stored = raw.histograms[metric]
        b = _bucketed(grid, stored)
        q = histogram_quantiles(grid, b.times, b.bounds, b.counts, quantiles)
        q["sum"] = sums(grid, stored.times, pd.DataFrame({"s": stored.sums}))["s"]
        latency[metric] = q
    measured = {c for c in frame.columns if frame[c].notna().any()}
    measured |= {m for m, q in latency.items() if q["count"].notna().any()}
    if not len(p) or p["preemptions"].isna().all():
        measured.discard("preemptions")
    return Series(grid=grid, frame=frame, latency=latency, measured=frozenset(measured))


def phase_share(series: Series) -> tuple[pd.DataFrame, str]:
    """Share of request time in prefill and in decode per bucket, and where it
    came from: vLLM's prefill and decode histograms where stored, else the time
    to first token (queue + prefill) against the rest of end-to-end time."""
    lat = series.latency
    parts = prefill_decode_seconds(
        {m: lat[m]["sum"] for m in LATENCY if m in series.measured}
    )
    if parts is None:
        empty = pd.Series(np.nan, index=series.grid.starts)
        return pd.DataFrame({"prefill": empty, "decode": empty}), ""
    first, rest, source = parts
    rest = rest.clip(lower=0)
    total = first + rest
    share = first / total.where(total > 0)
    return pd.DataFrame({"prefill": share, "decode": 1 - share}), source


@dataclass(frozen=True)
class DeviceGrid:
    """GPU or MIG instance x time: one matrix per DCGM gauge (NaN: blank)."""

    grid: Grid
    devices: list[str]
    layers: dict[str, np.ndarray]  # field -> devices x buckets
    measured: frozenset[str]


DEVICE_LAYERS = ("gr_engine_active_mean", "dram_active_mean", "gpu_util_mean")


DEVICE_KEYS = ("hostname", "gpu_index", "gpu_instance_id", "gpu_uuid", "mig_profile")


def device_grid_read(
    deployment: Deployment, *, start: datetime, end: datetime
) -> DeviceGrid:
    """Means per device and bucket, averaged by the database (a row per device
    and hour of 90 days of ``chat`` is 86,000 rows; the cells are 7,000)."""
    rows = DeviceHour.objects.filter(
        deployment=deployment, hour__gte=start, hour__lt=end
    )
    keys = sorted(
        set(rows.values_list(*DEVICE_KEYS).distinct()),
        key=lambda k: (k[0], k[1], k[2].zfill(4), k[3]),
    )
    label = {k: _device_label(k[0], k[1], k[4], k[2]) for k in keys}
    names = [label[k] for k in keys]
    columns = max_columns_for(len(names), max_cells=HEATMAP_CELLS)
    grid = grid_for(start, end, max_points=columns)
    width = grid.width.total_seconds()
    origin = grid.origin.timestamp()
    cells = list(
        rows.annotate(bucket=Floor((Epoch("hour") - Value(origin)) / Value(width)))
        .values(*DEVICE_KEYS, "bucket")
        .annotate(**{f: Avg(f) for f in DEVICE_LAYERS})
        .order_by()
    )
    rows_of = [label[tuple(c[k] for k in DEVICE_KEYS)] for c in cells]
    times = [grid.origin + grid.width * int(c["bucket"]) for c in cells]
    layers: dict[str, np.ndarray] = {}
    for field in DEVICE_LAYERS:
        values = [np.nan if c[field] is None else c[field] for c in cells]
        _, matrix = heatmap(grid, times, rows_of, values, order=names)
        layers[field] = matrix
    measured = frozenset(f for f, m in layers.items() if np.isfinite(m).any())
    return DeviceGrid(grid=grid, devices=names, layers=layers, measured=measured)


def _device_label(host: str, index: int, profile: str, instance: str) -> str:
    text = f"{host} GPU {index}"
    return f"{text} MIG {profile} #{instance}" if profile else text


TABLE_COLUMNS = (
    "requests", "requests_stop", "requests_length", "requests_aborted",
    "prompt_tokens", "generation_tokens", "replicas_mean", "replicas_max",
    "gpu_seconds", "kv_cache_usage_mean", "kv_cache_usage_max", "running_mean",
    "running_max", "waiting_mean", "waiting_max", "preemptions", "prefix_hit_rate",
)  # fmt: skip


def table_rows(series: Series) -> list[dict[str, object]]:
    """One dict per bucket for the page's table: figures as floats or None
    (missing, shown "—"), p95 latencies in seconds, and the bucket's hours."""
    f = series.frame
    hours = f["hours"].to_numpy(float).astype(int)
    columns = {c: _listed(f[c]) for c in TABLE_COLUMNS}
    p95 = {m: _listed(series.latency[m]["p95"]) for m in ("ttft", "itl", "e2e")}
    unknown = _listed(f["gpu_unknown"])
    extrapolated = _listed(f["extrapolated"])
    rows: list[dict[str, object]] = []
    for i, start in enumerate(series.grid.starts.to_pydatetime()):
        row: dict[str, object] = {
            "start": start,
            "hours": int(hours[i]),
            "gpu_unknown": int(unknown[i] or 0),
            "extrapolated": bool(extrapolated[i]),
        }
        for column in TABLE_COLUMNS:
            row[column] = columns[column][i] if hours[i] else None
        for metric, values in p95.items():
            row[f"{metric}_p95"] = values[i]
        rows.append(row)
    return rows


def _listed(values: pd.Series) -> list[float | None]:
    """Floats, NaN as None."""
    array = values.to_numpy(float)
    return [None if v != v else v for v in array.tolist()]
