"""The demo fleet: a deterministic generator that looks like a real one.

Nothing here reads the clock: the window's end is a parameter (the demo command
passes today's UTC midnight) and every random draw comes from a numpy Generator
seeded with ``(seed, deployment index)``, so the same seed and end give the same
rows, byte for byte.

What it shows, because real fleets show it:

* a daily cycle peaking around 20:00 UTC, quieter weekends, slow growth;
* a holiday whose traffic dips (unit cost rises; nothing is wrong);
* pods that come and go with an autoscaler and restart (counter resets): raw
  counter samples are simulated per pod every 60 s and turned into hourly
  figures by ``analytics.telemetry.hourly_counter_increases``, the same code
  the Prometheus adapter uses;
* a scrape gap of six hours: those hours have no rows, and the counters' jump
  lands in the first hour after the gap (docs/telemetry.md);
* an incident on ``chat``: a rollout reverts the KV-cache dtype from fp8 to
  auto for three days, batch capacity halves, the autoscaler adds replicas and
  GPU-hours (hence $ per 1k requests) rise about 40% at unchanged traffic;
* bills as Cost Explorer response pages (amortized and unblended, an RI fee on
  the 1st of each month, a monthly credit, one day of lag, the last two billed
  days estimated), parsed
  by ``costapp.sources.cost_explorer.records_from_response``.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
from scipy.special import ndtr

from analytics.telemetry import hourly_counter_increases, hourly_gauge_stats
from costapp.catalog import LIST_PRICES
from costapp.sources.base import (
    Batch,
    DeploymentHourRecord,
    DeviceHourRecord,
    DiscoveryRecord,
    HistogramRecord,
    Record,
    Window,
)
from costapp.sources.cost_explorer import records_from_response

ACCOUNT_ID = "123456789012"
TAG_KEY = "costapp:workload"
MINUTE = 60
HOUR = 3600
DAY = 86400
PAGE_DAYS = 7
BILL_LAG_DAYS = 1  # the newest day is billed on a later load, as in Cost Explorer
TARGET_UTILISATION = 0.75
EC2 = "Amazon Elastic Compute Cloud - Compute"
EC2_OTHER = "EC2 - Other"
EKS = "Amazon Elastic Container Service for Kubernetes"

# vLLM's bucket bounds (vllm/engine/metrics.py), +Inf last.
TTFT_BOUNDS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BOUNDS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BOUNDS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
LATENCY_SIGMA = 0.55
VLLM_SERIES = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:cache_config_info",
    "DCGM_FI_DEV_POWER_USAGE",
)


@dataclass(frozen=True)
class DemoDeployment:
    """How one demo deployment behaves (not the fleet file: that is YAML)."""

    name: str
    gpu_model: str
    gpus_per_replica: int  # device rows per replica (TP degree, or 1 MIG instance)
    gpu_share: float  # GPU-equivalents per replica (MIG: slices/7)
    mig_profile: str
    instance_type: str
    pool: str | None
    peak_rps: float
    capacity_rps: float  # per replica at the SLA, fp8 KV
    min_replicas: int
    max_replicas: int
    prompt_mean: float
    gen_mean: float
    p_length: float
    p_abort: float
    ttft_s: float  # median at low load
    itl_s: float
    # KV-cache capacity of one replica, tokens: what the capacity engine predicts
    # for the fleet file's configuration (tests/fleet/test_demo.py checks it).
    kv_tokens: int
    fb_total_mib: float
    host_prefix: str


DEPLOYMENTS: tuple[DemoDeployment, ...] = (
    DemoDeployment(
        "chat", "NVIDIA H100 80GB HBM3", 4, 4.0, "", "p5.48xlarge", "p5-chat",
        peak_rps=30.0, capacity_rps=3.0, min_replicas=3, max_replicas=24,
        prompt_mean=1800, gen_mean=450, p_length=0.035, p_abort=0.01,
        ttft_s=0.18, itl_s=0.016, kv_tokens=911_952, fb_total_mib=81559,
        host_prefix="ip-10-0-1-",
    ),
    DemoDeployment(
        "summarize", "NVIDIA L40S", 1, 1.0, "", "g6e.xlarge", None,
        peak_rps=6.0, capacity_rps=1.1, min_replicas=2, max_replicas=10,
        prompt_mean=3200, gen_mean=260, p_length=0.06, p_abort=0.005,
        ttft_s=0.45, itl_s=0.022, kv_tokens=395_264, fb_total_mib=46068,
        host_prefix="ip-10-0-2-",
    ),
    DemoDeployment(
        "classify", "NVIDIA L4", 1, 1.0, "", "g6.xlarge", None,
        peak_rps=22.0, capacity_rps=7.0, min_replicas=2, max_replicas=8,
        prompt_mean=420, gen_mean=6, p_length=0.002, p_abort=0.002,
        ttft_s=0.08, itl_s=0.018, kv_tokens=242_416, fb_total_mib=23034,
        host_prefix="ip-10-0-4-",
    ),
    DemoDeployment(
        "code-assist", "NVIDIA A100-SXM4-80GB", 1, 3 / 7, "3g.40gb",
        "p4de.24xlarge", "a100-mig",
        peak_rps=8.0, capacity_rps=1.6, min_replicas=2, max_replicas=8,
        prompt_mean=2600, gen_mean=120, p_length=0.02, p_abort=0.03,
        ttft_s=0.22, itl_s=0.026, kv_tokens=752_608, fb_total_mib=40192,
        host_prefix="ip-10-0-3-",
    ),
    DemoDeployment(
        "moderation", "NVIDIA A100-SXM4-80GB", 1, 2 / 7, "2g.20gb",
        "p4de.24xlarge", "a100-mig",
        peak_rps=12.0, capacity_rps=3.2, min_replicas=2, max_replicas=16,
        prompt_mean=650, gen_mean=8, p_length=0.001, p_abort=0.002,
        ttft_s=0.09, itl_s=0.024, kv_tokens=27_808, fb_total_mib=19968,
        host_prefix="ip-10-0-3-",
    ),
)  # fmt: skip
INCIDENT_DEPLOYMENT = "chat"
# fp8 -> auto (bf16) halves the KV cache: the batch halves and a replica
# carries about 1/1.4 of the traffic it did within the ITL target.
INCIDENT_CAPACITY = 1 / 1.4
POOL_NODES_MIG = 1  # the a100-mig pool is one p4de node, 3g+2g+2g on each GPU
WEEKLY = (1.0, 1.02, 1.03, 1.01, 0.95, 0.68, 0.62)  # Monday first


@dataclass(frozen=True)
class DemoEvents:
    """When the story's events happen, relative to the end of the demo."""

    holiday: date
    gap_start: datetime
    gap_end: datetime
    incident_start: datetime
    incident_end: datetime

    @classmethod
    def for_end(cls, end: datetime) -> DemoEvents:
        holiday = (end - timedelta(days=27)).date()
        while holiday.weekday() >= 5:  # a public holiday on a weekday
            holiday -= timedelta(days=1)
        gap_day = end - timedelta(days=20)
        incident = end - timedelta(days=10) + timedelta(hours=14)
        return cls(
            holiday=holiday,
            gap_start=gap_day + timedelta(hours=3),
            gap_end=gap_day + timedelta(hours=9),
            incident_start=incident,
            incident_end=incident + timedelta(hours=72),
        )


def _utc_midnight(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("end must be timezone-aware (UTC)")
    value = value.astimezone(UTC)
    return value.replace(hour=0, minute=0, second=0, microsecond=0)


def _stable_uuid(*parts: str) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).digest()[:16]
    return "GPU-" + str(uuid.UUID(bytes=digest))


def _hist_record(
    name: str,
    hour: datetime,
    metric: str,
    bounds: tuple[float, ...],
    count: float,
    median: float,
) -> HistogramRecord:
    """Bucket counts of ``count`` lognormal observations with that median."""
    z = (np.log(np.asarray(bounds)) - math.log(median)) / LATENCY_SIGMA
    cumulative = np.round(count * ndtr(z))
    total = float(round(count))
    mean = median * math.exp(LATENCY_SIGMA**2 / 2)
    return HistogramRecord(
        deployment=name,
        hour=hour,
        metric=metric,
        bounds=(*bounds, None),
        cumulative_counts=(*(float(c) for c in cumulative), total),
        total_sum=round(total * mean, 6),
        total_count=total,
    )


@dataclass
class _Simulated:
    """One deployment's simulation, per UTC hour (epoch seconds of the hour)."""

    spec: DemoDeployment
    hour_records: dict[int, DeploymentHourRecord]
    histograms: dict[int, list[HistogramRecord]]
    slot_hours: dict[int, int]  # hour -> replicas allocated (true, incl. gaps)
    activity: dict[int, float]  # hour -> mean utilisation of a replica


class DemoSource:
    """The demo fleet as a ``Source`` (see costapp.sources.base)."""

    name = "demo"

    def __init__(self, *, seed: int = 7, days: int = 90, end: datetime) -> None:
        if days < 1:
            raise ValueError(f"days must be at least 1, got {days}")
        self.seed = seed
        self.days = days
        self.end = _utc_midnight(end)
        self.start = self.end - timedelta(days=days)
        self.events = DemoEvents.for_end(self.end)

    @property
    def window(self) -> Window:
        return Window(self.start, self.end)

    # -- Source protocol -------------------------------------------------------

    def plan(self, window: Window) -> int:
        days = self._days_in(window)
        return len(days) + 3 * math.ceil(len(days) / PAGE_DAYS)

    def fetch(self, window: Window) -> Iterator[Batch]:
        days = self._days_in(window)
        if not days:
            return
        simulated = [self._simulate(i, spec) for i, spec in enumerate(DEPLOYMENTS)]
        devices = self._devices(simulated)
        t_first = int(days[0].timestamp())
        t_last = int(days[-1].timestamp()) + DAY
        for day in days:
            t0 = int(day.timestamp())
            records: list[Record] = []
            for sim in simulated:
                for h in range(t0, t0 + DAY, HOUR):
                    if h in sim.hour_records:
                        records.append(sim.hour_records[h])
                        records.extend(sim.histograms[h])
            for h in range(t0, t0 + DAY, HOUR):
                records.extend(devices.get(h, []))
            yield Batch(records=records)
        # Cost Explorer lags: the newest day has telemetry but no bill yet, so
        # the overview shows it provisional until the next load.
        bill_last = min(t_last, int(self.end.timestamp()) - BILL_LAG_DAYS * DAY)
        if bill_last > t_first:
            yield from self._bill_batches(simulated, t_first, bill_last)
        if days[-1] + timedelta(days=1) == self.end:
            yield Batch(records=self._discovery(), steps=0)

    # -- simulation ------------------------------------------------------------

    def _days_in(self, window: Window) -> list[datetime]:
        start = max(_utc_midnight(window.start), self.start)
        if window.start > start:
            start += timedelta(days=1)
        end = min(window.end, self.end)
        out = []
        day = start
        while day + timedelta(days=1) <= end:
            out.append(day)
            day += timedelta(days=1)
        return out

    def _traffic(self, rng: np.random.Generator, spec: DemoDeployment) -> np.ndarray:
        """Requests per second, one value per minute of the demo."""
        n_min = self.days * 1440
        t = self.start.timestamp() + np.arange(n_min) * MINUTE
        hour_of_day = (t % DAY) / HOUR
        daily = 0.3 + 0.7 * ((1 + np.cos(2 * np.pi * (hour_of_day - 20) / 24)) / 2) ** 2
        day_index = np.arange(n_min) // 1440
        weekday = np.array(
            [(self.start + timedelta(days=int(d))).weekday() for d in range(self.days)]
        )
        weekly = np.asarray(WEEKLY)[weekday][day_index]
        growth = 1 + 0.05 * (t - self.end.timestamp()) / (90 * DAY)
        holiday = np.where(
            np.asarray(
                [
                    (self.start + timedelta(days=int(d))).date() == self.events.holiday
                    for d in range(self.days)
                ]
            )[day_index],
            0.45,
            1.0,
        )
        hourly_noise = np.repeat(rng.lognormal(0.0, 0.04, self.days * 24), 60)
        rps: np.ndarray = (
            spec.peak_rps * daily * weekly * growth * holiday * hourly_noise
        )
        return rps

    def _simulate(self, index: int, spec: DemoDeployment) -> _Simulated:
        rng = np.random.default_rng([self.seed, index])
        n_hours = self.days * 24
        n_min = n_hours * 60
        t0 = int(self.start.timestamp())
        minute_t = t0 + np.arange(n_min, dtype=np.int64) * MINUTE
        rps = self._traffic(rng, spec)

        incident = np.zeros(n_hours, dtype=bool)
        if spec.name == INCIDENT_DEPLOYMENT:
            hour_t = t0 + np.arange(n_hours) * HOUR
            incident = (hour_t >= self.events.incident_start.timestamp()) & (
                hour_t < self.events.incident_end.timestamp()
            )
        capacity = spec.capacity_rps * np.where(incident, INCIDENT_CAPACITY, 1.0)

        # The autoscaler sizes each hour from its peak minute, and waits an hour
        # before scaling down (stabilisation window).
        hourly_rps = rps.reshape(n_hours, 60)
        desired = np.ceil(hourly_rps.max(axis=1) / (capacity * TARGET_UTILISATION))
        desired = np.clip(desired, spec.min_replicas, spec.max_replicas).astype(int)
        replicas = desired.copy()
        replicas[1:] = np.maximum(desired[1:], desired[:-1])
        replicas = np.clip(replicas, spec.min_replicas, spec.max_replicas)
        utilisation = hourly_rps.mean(axis=1) / (replicas * capacity)

        # Scrape gap: Prometheus saw nothing, the pods kept serving.
        scraped = ~(
            (minute_t >= self.events.gap_start.timestamp())
            & (minute_t < self.events.gap_end.timestamp())
        )
        minute_replicas = np.repeat(replicas, 60)
        per_pod_rps = rps / minute_replicas
        slots = int(replicas.max())
        active = np.arange(slots)[:, None] < minute_replicas[None, :]

        # Completions per pod and minute, split by finished_reason.
        done = rng.poisson(per_pod_rps[None, :] * MINUTE * active)
        length = rng.binomial(done, spec.p_length)
        abort = rng.binomial(done - length, spec.p_abort)
        stop = done - length - abort
        prompt = rng.poisson(done * spec.prompt_mean)
        generation = rng.poisson(done * spec.gen_mean)
        hit_rate = np.clip(rng.normal(0.35, 0.05, n_hours), 0.05, 0.9)
        hits = np.round(prompt * np.repeat(hit_rate, 60)[None, :])
        preempt_rate = np.where(
            np.repeat(incident, 60), 0.02, 0.0005 * np.repeat(utilisation, 60)
        )
        preemptions = rng.poisson(done * preempt_rate[None, :])
        counters = {
            "requests_stop": stop,
            "requests_length": length,
            "requests_aborted": abort,
            "prompt_tokens": prompt,
            "generation_tokens": generation,
            "preemptions": preemptions,
            "prefix_cache_queries": prompt,
            "prefix_cache_hits": hits,
        }
        # Pods restart now and then (OOM, node drain): the counter resets.
        restarts = rng.random((slots, n_min)) < 1 / (3 * 1440)

        totals: dict[str, dict[int, float]] = {k: defaultdict(float) for k in counters}
        for slot in range(slots):
            on = active[slot]
            edges = np.flatnonzero(np.diff(np.concatenate(([0], on.astype(int), [0]))))
            for a, b in zip(edges[::2], edges[1::2], strict=True):
                # One pod's life [a, b): pods alive at the start were born
                # before the window, so their first sample is only a baseline.
                born = a > 0
                seen = scraped[a:b]
                if not seen.any():
                    continue
                resets = restarts[slot, a:b]
                last_reset = np.maximum.accumulate(
                    np.where(resets, np.arange(b - a), -1)
                )
                ts = minute_t[a:b][seen] + MINUTE // 2  # scraped mid-minute
                for key, per_minute in counters.items():
                    cum = np.cumsum(per_minute[slot, a:b], dtype=float)
                    padded = np.concatenate(([0.0], cum))
                    # A restart zeroes the counter: value since the last one.
                    value = cum - np.where(
                        last_reset >= 0, padded[np.maximum(last_reset, 0)], 0.0
                    )
                    if not born:
                        # Running since before the window, until it restarts.
                        value = value + np.where(last_reset < 0, 1_000_000.0, 0.0)
                    for h, v in hourly_counter_increases(
                        ts, value[seen], born_in_window=born
                    ).items():
                        totals[key][h] += v

        # Gauges: one deployment-level value per scraped minute.
        sample_t = minute_t + MINUTE // 2
        e2e = spec.ttft_s + spec.gen_mean * spec.itl_s
        running = per_pod_rps * e2e * rng.lognormal(0, 0.08, n_min)
        kv_capacity = spec.kv_tokens * np.where(np.repeat(incident, 60), 0.5, 1.0)
        kv = np.clip(
            running * (spec.prompt_mean + spec.gen_mean / 2) / kv_capacity, 0.01, 1.0
        )
        waiting = np.maximum(0.0, running * (np.repeat(utilisation, 60) - 0.8) * 2.5)
        waiting = np.where(np.repeat(incident, 60), waiting + 0.3 * running, waiting)
        gauges = {
            "replicas": hourly_gauge_stats(
                sample_t[scraped], minute_replicas[scraped].astype(float)
            ),
            "kv": hourly_gauge_stats(sample_t[scraped], kv[scraped]),
            "running": hourly_gauge_stats(sample_t[scraped], running[scraped]),
            "waiting": hourly_gauge_stats(sample_t[scraped], waiting[scraped]),
        }

        hour_records: dict[int, DeploymentHourRecord] = {}
        histograms: dict[int, list[HistogramRecord]] = {}
        for h, (rep_mean, rep_max, n) in sorted(gauges["replicas"].items()):
            hi = (h - t0) // HOUR
            at = datetime.fromtimestamp(h, UTC)
            kv_s, run_s, wait_s = (gauges[g][h] for g in ("kv", "running", "waiting"))
            values = {k: totals[k].get(h, 0.0) for k in counters}
            hour_records[h] = DeploymentHourRecord(
                deployment=spec.name,
                hour=at,
                replicas_mean=rep_mean,
                replicas_max=rep_max,
                gpu_seconds=rep_mean * n * MINUTE * spec.gpu_share,
                kv_cache_usage_mean=round(kv_s[0], 6),
                kv_cache_usage_max=round(kv_s[1], 6),
                running_mean=round(run_s[0] * rep_mean, 4),
                running_max=round(run_s[1] * rep_max, 4),
                waiting_mean=round(wait_s[0] * rep_mean, 4),
                waiting_max=round(wait_s[1] * rep_max, 4),
                counts_exact=True,
                samples=round(rep_mean * n),
                **values,
            )
            u = float(utilisation[hi])
            slow = 1.25 if incident[hi] else 1.0
            itl = spec.itl_s * (1 + 0.6 * u * u) * slow
            ttft = spec.ttft_s * (1 + 2.0 * u**3) * (2.2 if incident[hi] else 1.0)
            n_req = values["requests_stop"] + values["requests_length"]
            n_tok = max(values["generation_tokens"] - n_req, 0.0)
            histograms[h] = [
                _hist_record(spec.name, at, "ttft", TTFT_BOUNDS, n_req, ttft),
                _hist_record(spec.name, at, "itl", ITL_BOUNDS, n_tok, itl),
                _hist_record(
                    spec.name, at, "e2e", E2E_BOUNDS, n_req, ttft + spec.gen_mean * itl
                ),
            ]
        slot_hours = {t0 + i * HOUR: int(r) for i, r in enumerate(replicas)}
        activity = {
            t0 + i * HOUR: float(min(u, 1.0)) for i, u in enumerate(utilisation)
        }
        return _Simulated(spec, hour_records, histograms, slot_hours, activity)

    def _devices(self, simulated: list[_Simulated]) -> dict[int, list[Record]]:
        """DCGM rows for every GPU or MIG instance a replica held in a scraped hour."""
        rows: dict[int, list[Record]] = defaultdict(list)
        mig_power: dict[tuple[int, int], float] = defaultdict(lambda: 70.0)
        for sim in simulated:
            spec = sim.spec
            if not spec.mig_profile:
                continue
            for h, replicas in sim.slot_hours.items():
                for slot in range(replicas):
                    gpu = self._mig_gpu(spec, slot)
                    mig_power[(h, gpu)] += spec.gpu_share * (90 + 250 * sim.activity[h])
        for sim in simulated:
            spec = sim.spec
            for h, record in sim.hour_records.items():
                up_fraction = record.samples / max(record.replicas_mean, 1e-9) / 60
                act = sim.activity[h]
                for slot in range(sim.slot_hours[h]):
                    if spec.mig_profile:
                        host = f"{spec.host_prefix}10"
                        gpu = self._mig_gpu(spec, slot)
                        instance = (
                            "2"
                            if spec.mig_profile.startswith("3g")
                            else str(3 + slot % 2)
                        )
                        power = mig_power[(h, gpu)]
                        rows[h].append(
                            DeviceHourRecord(
                                hostname=host,
                                gpu_uuid=_stable_uuid(host, str(gpu)),
                                hour=record.hour,
                                deployment=spec.name,
                                gpu_index=gpu,
                                gpu_model=spec.gpu_model,
                                mig_profile=spec.mig_profile,
                                gpu_instance_id=instance,
                                gpu_util_mean=None,
                                gr_engine_active_mean=round(0.2 + 0.7 * act, 4),
                                dram_active_mean=round(0.15 + 0.6 * act, 4),
                                fb_used_mib_mean=round(spec.fb_total_mib * 0.9, 1),
                                fb_free_mib_mean=round(spec.fb_total_mib * 0.1, 1),
                                power_w_mean=round(power, 2),
                                energy_j=round(power * HOUR * up_fraction, 1),
                                samples=round(60 * up_fraction),
                            )
                        )
                        continue
                    per_node = 8 // spec.gpus_per_replica
                    host = f"{spec.host_prefix}{10 + slot // per_node}"
                    for g in range(spec.gpus_per_replica):
                        index = (slot % per_node) * spec.gpus_per_replica + g
                        power = (
                            120 + 480 * act
                            if spec.gpus_per_replica > 1
                            else 40 + 250 * act
                        )
                        rows[h].append(
                            DeviceHourRecord(
                                hostname=host,
                                gpu_uuid=_stable_uuid(host, str(index)),
                                hour=record.hour,
                                deployment=spec.name,
                                gpu_index=index,
                                gpu_model=spec.gpu_model,
                                # ~100% whenever vLLM has work: not efficiency.
                                gpu_util_mean=round(min(99.0, 70 + 60 * act), 2),
                                gr_engine_active_mean=round(0.25 + 0.7 * act, 4),
                                dram_active_mean=round(0.2 + 0.65 * act, 4),
                                fb_used_mib_mean=round(spec.fb_total_mib * 0.92, 1),
                                fb_free_mib_mean=round(spec.fb_total_mib * 0.08, 1),
                                power_w_mean=round(power, 2),
                                energy_j=round(power * HOUR * up_fraction, 1),
                                samples=round(60 * up_fraction),
                            )
                        )
        return rows

    @staticmethod
    def _mig_gpu(spec: DemoDeployment, slot: int) -> int:
        # Each GPU of the node is split 3g.40gb + 2g.20gb + 2g.20gb.
        return slot if spec.mig_profile.startswith("3g") else slot // 2

    def _discovery(self) -> list[Record]:
        out: list[Record] = []
        for spec in DEPLOYMENTS:
            blocks = spec.kv_tokens // 16
            out.append(
                DiscoveryRecord(
                    deployment=spec.name,
                    observed_at=self.end - timedelta(minutes=1),
                    engine="vllm",
                    engine_generation="v1",
                    cache_config={
                        "block_size": "16",
                        "cache_dtype": "fp8",
                        "gpu_memory_utilization": "0.9",
                        "num_gpu_blocks": str(blocks),
                        "enable_prefix_caching": "True",
                    },
                    series_found=VLLM_SERIES,
                )
            )
        return out

    # -- bills -----------------------------------------------------------------

    def _bill_batches(
        self, simulated: list[_Simulated], t_first: int, t_last: int
    ) -> Iterator[Batch]:
        usage = self._usage_days(simulated, t_first, t_last)
        fees, credits = self._monthly_days(t_first, t_last)
        for request, group_by, record_type in (
            (usage, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "TAG", "Key": TAG_KEY}], "Usage"),
            (fees, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "DIMENSION", "Key": "USAGE_TYPE"}], "RIFee"),
            (credits, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "DIMENSION", "Key": "USAGE_TYPE"}], "Credit"),
        ):  # fmt: skip
            for page in self._pages(request, group_by):
                records: list[Record] = list(
                    records_from_response(
                        page,
                        account_id=ACCOUNT_ID,
                        group_by=group_by,
                        record_type=record_type,
                    )
                )
                yield Batch(records=records)

    def _estimated(self, day_t: int) -> bool:
        return day_t >= int(self.end.timestamp()) - (BILL_LAG_DAYS + 2) * DAY

    @staticmethod
    def _amount(value: Decimal, unit: str = "USD") -> dict[str, str]:
        return {"Amount": f"{value.quantize(Decimal('1E-10'))}", "Unit": unit}

    def _usage_days(
        self, simulated: list[_Simulated], t_first: int, t_last: int
    ) -> list[dict[str, Any]]:
        """ResultsByTime for GroupBy SERVICE + TAG, RECORD_TYPE Usage."""
        by_name = {s.spec.name: s for s in simulated}
        chat = by_name["chat"]
        results = []
        for day_t in range(t_first, t_last, DAY):
            day = datetime.fromtimestamp(day_t, UTC).date()
            hours = range(day_t, day_t + DAY, HOUR)
            groups: list[dict[str, Any]] = []

            def add(
                service: str,
                tag: str,
                amortized: Decimal,
                unblended: Decimal,
                quantity: Decimal,
                unit: str,
                groups: list[dict[str, Any]] = groups,
            ) -> None:
                groups.append(
                    {
                        "Keys": [service, f"{TAG_KEY}${tag}"],
                        "Metrics": {
                            "AmortizedCost": self._amount(amortized),
                            "BlendedCost": self._amount(unblended),
                            "UnblendedCost": self._amount(unblended),
                            "UsageQuantity": self._amount(quantity, unit),
                        },
                    }
                )

            # p5 pool: whole nodes, and the cluster autoscaler keeps a node an
            # hour after its last replica left, so the pool has idle node-hours.
            needed = [math.ceil(chat.slot_hours[h] * 4 / 8) for h in hours]
            before = math.ceil(chat.slot_hours.get(day_t - HOUR, needed[0]) * 4 / 8)
            nodes = [
                max(n, p) for n, p in zip(needed, [before, *needed[:-1]], strict=True)
            ]
            p5_hours = Decimal(sum(nodes))
            p5 = p5_hours * _list_price("p5.48xlarge", day)
            add(EC2, "p5-chat", p5, p5, p5_hours, "Hrs")
            mig_hours = Decimal(24 * POOL_NODES_MIG)
            mig = mig_hours * _list_price("p4de.24xlarge", day)
            add(EC2, "a100-mig", mig, mig, mig_hours, "Hrs")
            ebs_hours = p5_hours + mig_hours
            for name in ("summarize", "classify"):
                sim = by_name[name]
                inst_hours = Decimal(sum(sim.slot_hours[h] for h in hours))
                price = _list_price(sim.spec.instance_type, day)
                unblended = inst_hours * price
                amortized = unblended
                if name == "summarize":
                    # Two reserved g6e.xlarge (no upfront, 38% off) cover the
                    # floor: their usage is 0 unblended, the fee is amortized in.
                    covered = Decimal(48)
                    unblended = (inst_hours - covered) * price
                    amortized = unblended + covered * price * Decimal("0.62")
                add(EC2, name, amortized, unblended, inst_hours, "Hrs")
                ebs_hours += inst_hours
            # EBS volumes and data transfer: small, proportional to nodes/traffic.
            for tag, node_hours in (
                ("p5-chat", p5_hours),
                ("a100-mig", mig_hours),
                ("summarize", Decimal(sum(by_name["summarize"].slot_hours[h] for h in hours))),
                ("classify", Decimal(sum(by_name["classify"].slot_hours[h] for h in hours))),
            ):  # fmt: skip
                served = sum(
                    r.requests_stop + r.requests_length
                    for s in simulated
                    if (s.spec.pool or s.spec.name) == tag
                    for h in hours
                    if (r := s.hour_records.get(h)) is not None
                )
                other = node_hours * Decimal("0.0137") + Decimal(
                    str(round(served * 9e-7, 10))
                )
                add(EC2_OTHER, tag, other, other, node_hours, "N/A")
            eks = Decimal("2.4")  # the cluster itself: nobody's, on purpose
            add(EKS, "", eks, eks, Decimal(24), "Hrs")
            results.append(self._result(day_t, groups))
        return results

    def _monthly_days(
        self, t_first: int, t_last: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """RI fee (unblended on the 1st, amortized into usage) and a credit."""
        fees, credits = [], []
        price = _list_price("g6e.xlarge", self.end.date())
        for day_t in range(t_first, t_last, DAY):
            day = datetime.fromtimestamp(day_t, UTC).date()
            fee_groups: list[dict[str, Any]] = []
            credit_groups: list[dict[str, Any]] = []
            if day.day == 1:
                next_month = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
                hours = Decimal(24 * (next_month - day).days * 2)
                fee = hours * price * Decimal("0.62")
                fee_groups.append(
                    {
                        "Keys": [EC2, "HeavyUsage:g6e.xlarge"],
                        "Metrics": {
                            "AmortizedCost": self._amount(Decimal(0)),
                            "UnblendedCost": self._amount(fee),
                            "UsageQuantity": self._amount(hours, "Hrs"),
                        },
                    }
                )
                credit = Decimal("-500")
                credit_groups.append(
                    {
                        "Keys": [EC2, "USE1-PromotionalCredit"],
                        "Metrics": {
                            "AmortizedCost": self._amount(credit),
                            "UnblendedCost": self._amount(credit),
                            "UsageQuantity": self._amount(Decimal(0), "N/A"),
                        },
                    }
                )
            fees.append(self._result(day_t, fee_groups))
            credits.append(self._result(day_t, credit_groups))
        return fees, credits

    def _result(self, day_t: int, groups: list[dict[str, Any]]) -> dict[str, Any]:
        start = datetime.fromtimestamp(day_t, UTC).date()
        return {
            "TimePeriod": {
                "Start": start.isoformat(),
                "End": (start + timedelta(days=1)).isoformat(),
            },
            "Total": {},
            "Groups": groups,
            "Estimated": self._estimated(day_t),
        }

    @staticmethod
    def _pages(
        results: list[dict[str, Any]], group_by: list[dict[str, str]]
    ) -> Iterator[dict[str, Any]]:
        """GetCostAndUsage response pages, NextPageToken on all but the last."""
        for i in range(0, len(results), PAGE_DAYS):
            page: dict[str, Any] = {
                "GroupDefinitions": group_by,
                "ResultsByTime": results[i : i + PAGE_DAYS],
                "DimensionValueAttributes": [],
                "ResponseMetadata": {"HTTPStatusCode": 200},
            }
            if i + PAGE_DAYS < len(results):
                page["NextPageToken"] = f"demo-page-{i // PAGE_DAYS + 1}"
            yield page


def _list_price(instance_type: str, day: date) -> Decimal:
    """The on-demand price in force that day (the catalogue is dated)."""
    prices = [
        p
        for p in LIST_PRICES
        if p.instance_type == instance_type and p.effective_from <= day
    ]
    if not prices:
        raise ValueError(f"no list price for {instance_type} on {day}")
    return max(prices, key=lambda p: p.effective_from).price_per_hour
