"""From raw samples to hourly records: pure, no I/O (tested without HTTP)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analytics.telemetry import (
    HOUR_S,
    hourly_counter_increases,
    hourly_gauge_stats,
)
from analytics.telemetry_windows import scrape_interval, slot_totals
from costapp.sources.base import (
    DeploymentHourRecord,
    DeviceHourRecord,
    HistogramRecord,
    Record,
)
from costapp.sources.engines import (
    DCGM,
    ENGINES,
    PREFILL_POOL_FIELDS,
    PROMPT_SOURCE_FIELDS,
    DeviceKey,
    EngineTable,
    Role,
    counter_field,
    device_key,
    keeps_rank,
    replica_key,
)
from costapp.sources.prometheus.reader import LabelKey, RawSeries, _label_key
from costapp.sources.prometheus.targets import Target
from costapp.sources.promql import labels_match, selector_parse


@dataclass
class CounterState:
    """Last sample of each counter series, carried from one slice to the next."""

    last: dict[LabelKey, tuple[float, float]] = field(default_factory=dict)


def _hour(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _counter_hourly(
    s: RawSeries,
    *,
    state: CounterState,
    born: bool,
    slice_start_s: float,
    hours: _HourRuns | None = None,
) -> dict[int, float]:
    key = _label_key(s.labels)
    previous = state.last.get(key)
    t, v = s.t, s.v
    if previous is not None and previous[0] < t[0]:
        t = np.concatenate([[previous[0]], t])
        v = np.concatenate([[previous[1]], v])
        born = False
    runs = (hours or _HourRuns()).of(t)
    if runs is None:
        hourly = hourly_counter_increases(t, v, born_in_window=born)
    else:
        # Compiled on first use: numba stays out of processes without records.
        from costapp.sources.prometheus.compiled import hourly_increases

        # hourly_counter_increases bit for bit: the same increases summed in
        # the same order, without its two sorts.
        sums = hourly_increases(
            np.asarray(v, dtype=float), runs.first, runs.counts, bool(born)
        )
        hourly = dict(zip(runs.hours.tolist(), sums.tolist(), strict=True))
    state.last[key] = (float(s.t[-1]), float(s.v[-1]))
    return {h: x for h, x in hourly.items() if h >= slice_start_s}


@dataclass(frozen=True)
class _Runs:
    """Samples in time order cut at the hours, as ``np.unique(hours,
    return_index, return_counts)`` would give them."""

    hours: np.ndarray
    first: np.ndarray
    counts: np.ndarray


class _HourRuns:
    """The hour runs of each distinct timestamp array of a slice.

    ``np.unique`` sorting every series (already sorted by ``merge_samples``)
    was most of a backfill's CPU after decoding (docs/benchmarks.md). The
    series of one scrape share their timestamps, so a deployment's ~90 series
    hold a few distinct arrays: each is cut once, the others compared to it.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[int, float, float], list[tuple[np.ndarray, _Runs]]]
        self._known = defaultdict(list)
        # A series is cut twice (its samples per hour, then its increases):
        # the second time by the array itself, without comparing its values.
        self._seen: dict[int, tuple[np.ndarray, _Runs | None]] = {}

    def of(self, t: np.ndarray) -> _Runs | None:
        """None when the samples are not in time order (or there are none)."""
        seen = self._seen.get(id(t))
        if seen is not None and seen[0] is t:
            return seen[1]
        runs = self._cut(t)
        self._seen[id(t)] = (t, runs)
        return runs

    def _cut(self, t: np.ndarray) -> _Runs | None:
        if t.size == 0:
            return None
        known = self._known[(t.size, float(t[0]), float(t[-1]))]
        for other, runs in known:
            if bool((other == t).all()):
                return runs
        if not bool(np.all(t[1:] >= t[:-1])):
            return None
        hours = (np.floor(t / HOUR_S) * HOUR_S).astype(np.int64)
        starts = np.concatenate(([True], hours[1:] != hours[:-1]))
        first = np.flatnonzero(starts)
        runs = _Runs(
            hours=hours[first],
            first=first,
            counts=np.diff(np.append(first, t.size)),
        )
        known.append((t, runs))
        return runs


def _preferred(
    series: list[RawSeries], table: EngineTable
) -> list[tuple[RawSeries, Any]]:
    """(series, role) pairs keeping, per replica and field, the newest name."""
    pairs = []
    best: dict[tuple[str, str, LabelKey], int] = {}
    for s in series:
        if not keeps_rank(s.labels, table=table):
            continue
        for role in table.roles_of(s.labels.get("__name__", "")):
            k = (role.kind, role.field, replica_key(s.labels, table=table))
            best[k] = min(best.get(k, role.preference), role.preference)
            pairs.append((s, role))
    return [
        (s, r)
        for s, r in pairs
        if best[(r.kind, r.field, replica_key(s.labels, table=table))] == r.preference
    ]


def pool_reads(target: Target) -> Callable[[dict[str, str], Role], bool] | None:
    """For a disaggregated deployment, whether a series is read for a role:
    the prefill engines' for ``PREFILL_POOL_FIELDS``, the decode engines'
    for the rest, so that each request and token is counted once. None for
    a deployment of one pool (every series read)."""
    if not target.prefill_selector:
        return None
    matchers = selector_parse(target.prefill_selector)

    def reads(labels: dict[str, str], role: Role) -> bool:
        return labels_match(matchers, labels) == (role.field in PREFILL_POOL_FIELDS)

    return reads


def deployment_records(
    *,
    target: Target,
    series: list[RawSeries],
    born: Callable[[dict[str, str]], bool],
    state: CounterState,
    slice_start_s: float,
    slice_end_s: float,
    interval_default: float,
    device_seconds: dict[int, float] | None = None,
) -> list[Record]:
    """Hourly deployment and histogram records of one slice from raw samples.

    ``device_seconds``: None when the deployment has no DCGM selector (GPU
    seconds from the replica count); else the DCGM GPU-seconds per hour, an
    hour absent from it unknown.
    """
    table = ENGINES[target.engine]
    pairs = _preferred(series, table)
    interval = scrape_interval([s.t for s, _ in pairs], interval_default)
    reads = pool_reads(target)
    # A disaggregated deployment's replicas are both pools' engines.
    up_parts: list[tuple[np.ndarray, np.ndarray]] = []

    counters: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    gauges: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    buckets: dict[str, dict[float, dict[int, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    hist_sum: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_count: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_hours: dict[str, set[int]] = defaultdict(set)
    samples: dict[int, int] = defaultdict(int)
    newest: dict[int, float] = {}
    hours_seen: set[int] = set()
    counted: set[LabelKey] = set()

    hourly_by_key: dict[LabelKey, dict[int, float]] = {}
    hour_runs = _HourRuns()
    # Series sharing a timestamp array (one scrape's) add the same samples to
    # the same hours, with the same newest: each array's hours are walked at
    # its first series only, and its other series counted.
    more_holders: dict[int, tuple[_Runs, int]] = {}
    for s, role in pairs:
        key = _label_key(s.labels)
        if key not in counted:
            counted.add(key)
            runs = hour_runs.of(s.t)
            if runs is not None and id(runs) in more_holders:
                more_holders[id(runs)] = (runs, more_holders[id(runs)][1] + 1)
            else:
                if runs is None:
                    hours = (np.floor(s.t / HOUR_S) * HOUR_S).astype(np.int64)
                    uniq, first, n = np.unique(
                        hours, return_index=True, return_counts=True
                    )
                else:
                    uniq, first, n = runs.hours, runs.first, runs.counts
                    more_holders[id(runs)] = (runs, 0)
                # Samples are in time order: an hour's last is its newest.
                last = (s.t[first + n - 1]).tolist()
                for h, c, t in zip(uniq.tolist(), n.tolist(), last, strict=True):
                    if slice_start_s <= h < slice_end_s:
                        samples[h] += c
                        hours_seen.add(h)
                        newest[h] = max(newest.get(h, t), t)
        if role.kind == "gauge":
            if reads is not None and role.field == table.up_field:
                up_parts.append((s.t, s.v * role.scale))
            if reads is None or reads(s.labels, role):
                gauges[role.field].append((s.t, s.v * role.scale))
            continue
        if role.kind not in {"counter", "histogram"}:
            continue
        if reads is not None and not reads(s.labels, role):
            continue
        # A series with two roles (TGI's length-histogram sum is also its token
        # counter) is turned into increases once, then routed to both.
        if key not in hourly_by_key:
            hourly_by_key[key] = _counter_hourly(
                s,
                state=state,
                born=born(s.labels),
                slice_start_s=slice_start_s,
                hours=hour_runs,
            )
        hourly = hourly_by_key[key]
        if role.kind == "counter":
            name = counter_field(role, s.labels)
            if name is None:
                continue
            for h, x in hourly.items():
                counters[name][h] += x * role.scale
        elif role.part == "bucket":
            le_text = s.labels.get("le", "+Inf")
            le = math.inf if le_text in {"+Inf", "Inf", "inf"} else float(le_text)
            for h, x in hourly.items():
                buckets[role.field][le][h] += x
                hist_hours[role.field].add(h)
        elif role.part == "sum":
            for h, x in hourly.items():
                hist_sum[role.field][h] += x
        else:
            for h, x in hourly.items():
                hist_count[role.field][h] += x

    for runs, more in more_holders.values():
        for h, c in zip(runs.hours.tolist(), runs.counts.tolist(), strict=True):
            if more and slice_start_s <= h < slice_end_s:
                samples[h] += c * more

    gauge_stats: dict[str, dict[int, tuple[float, float]]] = {}
    replicas: dict[int, tuple[float, float]] = {}
    for name, parts in gauges.items():
        times, sums, maxes, counts = slot_totals(parts, interval)
        if name == "kv_cache_usage":
            mean_stats = hourly_gauge_stats(times, sums / counts)
            max_stats = hourly_gauge_stats(times, maxes)
            gauge_stats[name] = {
                h: (mean_stats[h][0], max_stats[h][1]) for h in mean_stats
            }
        else:
            gauge_stats[name] = {
                h: (m, x) for h, (m, x, _) in hourly_gauge_stats(times, sums).items()
            }
        if name == table.up_field and reads is None:
            replicas = _replicas(times, counts, interval)
    if up_parts:
        times, _, _, counts = slot_totals(up_parts, interval)
        replicas = _replicas(times, counts, interval)

    records: list[Record] = []
    for h in sorted(hours_seen):
        reps_mean, reps_max = replicas.get(h, (None, None))
        # Measured or unknown, never 0: with a DCGM selector an hour without
        # DCGM samples is unknown; without one, an hour without a replica
        # count is (replicas x the deployment's GPUs per replica otherwise).
        gpu_seconds: float | None
        if device_seconds is not None:
            gpu_seconds = device_seconds.get(h)
        elif reps_mean is not None:
            gpu_seconds = reps_mean * HOUR_S * target.gpu_share
        else:
            gpu_seconds = None

        def g(name: str, i: int, h: int = h) -> float | None:
            stat = gauge_stats.get(name, {}).get(h)
            return None if stat is None else stat[i]

        def c(name: str, h: int = h) -> float | None:
            return counters[name].get(h) if name in counters else None

        records.append(
            DeploymentHourRecord(
                deployment=target.name,
                hour=_hour(h),
                requests_stop=c("requests_stop") or 0.0,
                requests_length=c("requests_length") or 0.0,
                requests_aborted=c("requests_aborted") or 0.0,
                prompt_tokens=c("prompt_tokens") or 0.0,
                generation_tokens=c("generation_tokens") or 0.0,
                replicas_mean=reps_mean,
                replicas_max=reps_max,
                gpu_seconds=gpu_seconds,
                kv_cache_usage_mean=g("kv_cache_usage", 0),
                kv_cache_usage_max=g("kv_cache_usage", 1),
                running_mean=g("running", 0),
                running_max=g("running", 1),
                waiting_mean=g("waiting", 0),
                waiting_max=g("waiting", 1),
                preemptions=c("preemptions"),
                prefix_cache_queries=c("prefix_cache_queries"),
                prefix_cache_hits=c("prefix_cache_hits"),
                **{f: c(f) for f in PROMPT_SOURCE_FIELDS.values()},
                counts_exact=True,
                samples=samples[h],
                last_sample_at=datetime.fromtimestamp(newest[h], UTC),
            )
        )
        for metric in sorted(buckets):
            if h not in hist_hours[metric]:
                continue
            bounds = sorted(buckets[metric])
            records.append(
                HistogramRecord(
                    deployment=target.name,
                    hour=_hour(h),
                    metric=metric,
                    bounds=tuple(None if math.isinf(b) else b for b in bounds),
                    cumulative_counts=tuple(
                        buckets[metric][b].get(h, 0.0) for b in bounds
                    ),
                    total_sum=hist_sum[metric].get(h, 0.0),
                    total_count=hist_count[metric].get(h, 0.0),
                )
            )
    return records


def _replicas(
    times: np.ndarray, counts: np.ndarray, interval: float
) -> dict[int, tuple[float, float]]:
    """Per hour: replica-seconds seen over the hour (a replica up for half of
    the hour counts one half) and the most replicas in one scrape slot."""
    per_hour = HOUR_S / interval
    return {
        hour: (mean * slots / per_hour, top)
        for hour, (mean, top, slots) in hourly_gauge_stats(times, counts).items()
    }


def device_records(
    *,
    deployment: str | None,
    series: list[RawSeries],
    born: Callable[[dict[str, str]], bool],
    state: CounterState,
    slice_start_s: float,
    slice_end_s: float,
    interval_default: float,
) -> tuple[list[DeviceHourRecord], dict[int, float]]:
    """Per GPU or MIG instance and hour; and GPU-equivalent seconds per hour.

    A device's samples of its best "up" series (``DCGM_UP``: FB_USED, or the
    next the exporter reports for it) are its seconds up; an hour with a
    device whose share cannot be read (an unknown MIG profile) is unknown.
    """
    interval = scrape_interval([s.t for s in series], interval_default)
    per_device: dict[DeviceKey, dict[str, Any]] = defaultdict(dict)
    up_by_rank: dict[DeviceKey, dict[int, dict[int, int]]] = defaultdict(dict)
    for s in series:
        name = s.labels.get("__name__", "")
        mapped = DCGM.get(name)
        if mapped is None or mapped.field is None:
            continue
        key = device_key(s.labels)
        if mapped.kind == "counter":
            hourly = _counter_hourly(
                s, state=state, born=born(s.labels), slice_start_s=slice_start_s
            )
            per_device[key][mapped.field] = {
                h: x * mapped.scale for h, x in hourly.items()
            }
            continue
        stats = hourly_gauge_stats(s.t, s.v * mapped.scale)
        per_device[key][mapped.field] = {
            h: m for h, (m, _, _) in stats.items() if h >= slice_start_s
        }
        if mapped.up is not None:
            up_by_rank[key][mapped.up] = {
                h: n for h, (_, _, n) in stats.items() if h >= slice_start_s
            }
    records: list[DeviceHourRecord] = []
    gpu_seconds: dict[int, float] = defaultdict(float)
    unknown: set[int] = set()
    for key in sorted(
        per_device, key=lambda k: (k.hostname, k.gpu_uuid, k.gpu_instance_id)
    ):
        values = per_device[key]
        ranks = up_by_rank.get(key, {})
        up = ranks[min(ranks)] if ranks else {}
        share = key.gpu_share
        hours = sorted({h for per in values.values() for h in per if h < slice_end_s})
        for h in hours:
            n = up.get(h, 0)
            if h in up:  # an hour without an "up" series measured nothing
                if share is None:
                    unknown.add(h)
                else:
                    gpu_seconds[h] += n * interval * share
            records.append(
                DeviceHourRecord(
                    hostname=key.hostname,
                    gpu_uuid=key.gpu_uuid,
                    hour=_hour(h),
                    deployment=deployment,
                    gpu_index=key.gpu_index,
                    gpu_model=key.gpu_model,
                    mig_profile=key.mig_profile,
                    gpu_instance_id=key.gpu_instance_id,
                    samples=int(n),
                    **{f: per.get(h) for f, per in values.items()},
                )
            )
    return records, {h: x for h, x in gpu_seconds.items() if h not in unknown}
