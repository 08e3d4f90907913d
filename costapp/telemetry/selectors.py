"""Reads shared by the telemetry pages and the command."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np
from django.db.models import Avg, Count, Max, Min, QuerySet, Sum
from django.utils import timezone

from analytics.histograms import BucketMismatch, bucket_quantile, buckets_sum
from costapp.days import day_start, utc_midnight
from costapp.models import (
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    IngestRun,
)
from costapp.sources.engines import (
    DCGM_FIELDS,
    ExporterGeneration,
    dcgm_exporter_generations,
)
from costapp.telemetry.series import Raw, raw_read

LATENCY_METRICS = ("ttft", "itl", "e2e", "queue", "prefill", "decode")
QUANTILES = (0.5, 0.95, 0.99)


def telemetry_runs(limit: int = 30) -> QuerySet[IngestRun]:
    return IngestRun.objects.filter(source="prometheus").order_by("-created_at")[:limit]


def default_window(deployment: Deployment, days: int = 2) -> tuple[datetime, datetime]:
    """The last ``days`` UTC days that hold data (not "now": backfills are
    old), whole days so the window is one the form can ask for again."""
    last = DeploymentHour.objects.filter(deployment=deployment).aggregate(Max("hour"))[
        "hour__max"
    ]
    if last is None:
        last = timezone.now()
    end = day_start(last) + timedelta(days=1)
    return end - timedelta(days=days), end


def _percentiles(items: list[tuple[list, list]]) -> dict[str, float | None]:
    try:
        summed = buckets_sum(items)
    except BucketMismatch:
        return {f"p{int(q * 100)}": None for q in QUANTILES}
    return {
        f"p{int(q * 100)}": (bucket_quantile(q, summed) if summed else None)
        for q in QUANTILES
    }


def window_latency(
    deployment: Deployment,
    start: datetime,
    end: datetime,
    raw: Raw | None = None,
) -> dict[str, dict[str, float | None]]:
    """Percentiles over the whole window, from buckets summed over its hours
    (never from averaged percentiles). ``raw``: the page's read of the window
    (with every metric of ``LATENCY_METRICS``), summed here, not read again."""
    if raw is None:
        raw = raw_read(deployment, start=start, end=end, metrics=LATENCY_METRICS)
    out: dict[str, dict[str, float | None]] = {}
    for m in LATENCY_METRICS:
        h = raw.histograms.get(m)
        if h is None or not h.counts:
            continue
        by_bounds: dict[int, list[int]] = {}
        for row, b in enumerate(h.bounds):
            by_bounds.setdefault(id(b), []).append(row)
        summed = []
        for rows in by_bounds.values():
            counts = [h.counts[r] for r in rows]
            width = {len(c) for c in counts}
            if len(width) == 1:
                totals = np.asarray(counts, dtype=float).sum(axis=0).tolist()
                summed.append((h.bounds[rows[0]], totals))
            else:  # as buckets_sum adds them: it refuses the mismatch
                summed.extend((h.bounds[r], h.counts[r]) for r in rows)
        out[m] = _percentiles(summed)
    return out


@dataclass(frozen=True)
class DeviceSummary:
    """One GPU or MIG instance over a window."""

    hostname: str
    gpu_uuid: str
    gpu_index: int
    gpu_model: str
    mig_profile: str
    gpu_instance_id: str
    hours: int
    first: datetime
    last: datetime
    gpu_util_mean: float | None
    gr_engine_active_mean: float | None
    dram_active_mean: float | None
    fb_used_mib_mean: float | None
    fb_free_mib_mean: float | None
    power_w_mean: float | None
    energy_j: float | None


def device_summary(
    deployment: Deployment, start: datetime, end: datetime
) -> list[DeviceSummary]:
    """One row per GPU or MIG instance over the window, aggregated by the
    database: a row per device and hour was most of a month page's 8 MB.
    Means are over the hours the device was seen; energy is summed; a gauge
    a device never reported stays None (Avg ignores NULLs)."""
    rows = (
        DeviceHour.objects.filter(deployment=deployment, hour__gte=start, hour__lt=end)
        .values(
            "hostname",
            "gpu_uuid",
            "gpu_index",
            "gpu_model",
            "mig_profile",
            "gpu_instance_id",
        )
        .annotate(
            hours=Count("id"),
            first=Min("hour"),
            last=Max("hour"),
            gpu_util_mean=Avg("gpu_util_mean"),
            gr_engine_active_mean=Avg("gr_engine_active_mean"),
            dram_active_mean=Avg("dram_active_mean"),
            fb_used_mib_mean=Avg("fb_used_mib_mean"),
            fb_free_mib_mean=Avg("fb_free_mib_mean"),
            power_w_mean=Avg("power_w_mean"),
            energy_j=Sum("energy_j"),
        )
        .order_by("hostname", "gpu_index", "gpu_instance_id", "gpu_uuid")
    )
    return [DeviceSummary(**row) for row in rows]


def discovery(deployment: Deployment) -> EngineDiscovery | None:
    return EngineDiscovery.objects.filter(deployment=deployment).first()


def dcgm_exporter_read(found: EngineDiscovery | None) -> list[ExporterGeneration]:
    """The DCGM exporter generation the last discovery saw, by the host label
    of the DCGM series it kept."""
    if found is None:
        return []
    return dcgm_exporter_generations(
        labels
        for name, sets in found.label_sets.items()
        if name in DCGM_FIELDS
        for labels in sets
    )


def latency_daily_percentiles(
    deployment: Deployment,
    *,
    start: date,
    end: date,
    metric: str,
    quantiles: tuple[float, ...] = (0.5, 0.95),
) -> dict[date, tuple[float | None, ...]]:
    """Per UTC day in ``[start, end)``: percentiles from the day's summed hourly
    buckets (the deployment page's latency chart)."""
    lower, upper = utc_midnight(start), utc_midnight(end)
    by_day: dict[date, list[tuple[list[float | None], list[float]]]] = defaultdict(list)
    rows = HistogramHour.objects.filter(
        deployment=deployment, metric=metric, hour__gte=lower, hour__lt=upper
    ).values_list("hour", "bounds", "cumulative_counts")
    for hour, bounds, counts in rows:
        by_day[hour.astimezone(UTC).date()].append((bounds, counts))
    out: dict[date, tuple[float | None, ...]] = {}
    for day in sorted(by_day):
        summed = buckets_sum(by_day[day])
        out[day] = tuple(
            bucket_quantile(q, summed) if summed is not None else None
            for q in quantiles
        )
    return out


@dataclass(frozen=True)
class ServingHealth:
    """How a deployment served over a span: what on-call looks at beside a
    cost move. None: not measured in the span (never 0)."""

    hours: int
    ttft_p95_s: float | None
    itl_p95_s: float | None
    preemptions: float | None
    requests: float
    kv_cache_usage_mean: float | None
    kv_cache_usage_max: float | None
    waiting_mean: float | None

    @property
    def preemptions_per_1k(self) -> float | None:
        if self.preemptions is None or self.requests <= 0:
            return None
        return self.preemptions / self.requests * 1000


def serving_health_read(
    deployment: Deployment, *, start: datetime, end: datetime
) -> ServingHealth:
    """Latency p95 from the span's summed buckets, preemptions summed over the
    hours that report them, KV cache and queue as the mean of hourly means."""
    hours = DeploymentHour.objects.filter(
        deployment=deployment, hour__gte=start, hour__lt=end
    ).aggregate(
        n=Count("pk"),
        preemptions=Sum("preemptions"),
        requests_stop=Sum("requests_stop"),
        requests_length=Sum("requests_length"),
        kv_mean=Avg("kv_cache_usage_mean"),
        kv_max=Max("kv_cache_usage_max"),
        waiting=Avg("waiting_mean"),
    )
    latency = window_latency(deployment, start, end)
    return ServingHealth(
        hours=hours["n"],
        ttft_p95_s=latency.get("ttft", {}).get("p95"),
        itl_p95_s=latency.get("itl", {}).get("p95"),
        preemptions=hours["preemptions"],
        requests=(hours["requests_stop"] or 0.0) + (hours["requests_length"] or 0.0),
        kv_cache_usage_mean=hours["kv_mean"],
        kv_cache_usage_max=hours["kv_max"],
        waiting_mean=hours["waiting"],
    )
