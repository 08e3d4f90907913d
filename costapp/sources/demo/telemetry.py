"""The demo's telemetry: a minute-level simulation of each deployment's
pods, turned into hourly records by the same code the Prometheus adapter uses.

Every random draw comes from a numpy Generator seeded with ``(seed,
deployment index)``, so the same seed and end give the same rows.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from scipy.special import ndtr

from analytics.telemetry import hourly_counter_increases, hourly_gauge_stats
from costapp.sources.base import (
    DeploymentHourRecord,
    DeviceHourRecord,
    DiscoveryRecord,
    HistogramRecord,
    Record,
)
from costapp.sources.demo.story import (
    CURVE_ITL_SIGMA,
    DAY,
    DEPLOYMENTS,
    HOUR,
    INCIDENT_CAPACITY,
    INCIDENT_DEPLOYMENT,
    MINUTE,
    WEEKLY,
    DemoDeployment,
    DemoEvents,
)
from costapp.sources.engine_buckets import VLLM_BUCKETS

TARGET_UTILISATION = 0.75


# vLLM's bucket bounds (engines.py), +Inf last.
TTFT_BOUNDS = VLLM_BUCKETS["ttft"]
ITL_BOUNDS = VLLM_BUCKETS["itl"]
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
    sigma: float = LATENCY_SIGMA,
) -> HistogramRecord:
    """Bucket counts of ``count`` lognormal observations with that median."""
    z = (np.log(np.asarray(bounds)) - math.log(median)) / sigma
    cumulative = np.round(count * ndtr(z))
    total = float(round(count))
    mean = median * math.exp(sigma**2 / 2)
    return HistogramRecord(
        deployment=name,
        hour=hour,
        metric=metric,
        bounds=(*bounds, None),
        cumulative_counts=(*(float(c) for c in cumulative), total),
        total_sum=round(total * mean, 6),
        total_count=total,
    )


# vLLM's request_prompt_tokens buckets (build_1_2_5_buckets up to the model's
# 131,072-token maximum), +Inf last.
PROMPT_BOUNDS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
    100000,
)  # fmt: skip
PROMPT_SIGMA = 0.5


def curve_itl_s(spec: DemoDeployment, batch: np.ndarray) -> np.ndarray:
    """The declared true mean ITL at ``batch`` (linear between the points)."""
    xs, ys = zip(*spec.itl_curve, strict=True)
    itl: np.ndarray = np.interp(batch, xs, ys)
    return itl


def curve_batch(spec: DemoDeployment, tokens_per_s: np.ndarray) -> np.ndarray:
    """Running batch per replica that serves ``tokens_per_s`` on the declared
    curve: every running sequence makes one token per step, so B = rate x ITL(B)
    (a contraction while rate x slope < 1; iterated to convergence)."""
    batch = tokens_per_s * curve_itl_s(spec, np.ones_like(tokens_per_s))
    for _ in range(60):
        batch = tokens_per_s * curve_itl_s(spec, batch)
    return batch


def _prompt_record(
    name: str, hour: datetime, count: float, mean: float
) -> HistogramRecord:
    """``vllm:request_prompt_tokens`` of ``count`` lognormal prompts of that mean."""
    median = mean / math.exp(PROMPT_SIGMA**2 / 2)
    z = (np.log(np.asarray(PROMPT_BOUNDS)) - math.log(median)) / PROMPT_SIGMA
    total = float(round(count))
    return HistogramRecord(
        deployment=name,
        hour=hour,
        metric="prompt_tokens",
        bounds=(*PROMPT_BOUNDS, None),
        cumulative_counts=(*(float(c) for c in np.round(count * ndtr(z))), total),
        total_sum=round(total * mean, 3),
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


# vLLM preempts a running request only when a step finds no free KV block,
# that is with the cache full: below KV_PREEMPT_FROM of a minute's mean usage
# nothing is preempted; at a full cache PREEMPT_AT_FULL of the requests that
# finish in the minute were preempted once on the way.
KV_PREEMPT_FROM = 0.9
PREEMPT_AT_FULL = 0.05


def preemption_rate(kv: np.ndarray) -> np.ndarray:
    """Preemptions per finished request at a minute's KV-cache usage."""
    near_full = np.clip((kv - KV_PREEMPT_FROM) / (1 - KV_PREEMPT_FROM), 0.0, 1.0)
    rate: np.ndarray = PREEMPT_AT_FULL * near_full**2
    return rate


def kv_cache(
    spec: DemoDeployment,
    running: np.ndarray,
    utilisation: np.ndarray,
    incident: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(KV usage, running, waiting) per minute: each running sequence holds its
    prompt and half its output on average; no more run than the cache holds
    (the rest wait), so usage never passes 1 while the batch grows."""
    kv_capacity = spec.kv_tokens * np.where(np.repeat(incident, 60), 0.5, 1.0)
    sequence_tokens = spec.prompt_mean + spec.gen_mean / 2
    fits = kv_capacity / sequence_tokens
    queued = np.maximum(running - fits, 0.0)
    running = np.minimum(running, fits)
    kv = np.clip(running * sequence_tokens / kv_capacity, 0.01, 1.0)
    waiting = np.maximum(0.0, running * (np.repeat(utilisation, 60) - 0.8) * 2.5)
    waiting = np.where(np.repeat(incident, 60), waiting + 0.3 * running, waiting)
    return kv, running, waiting + queued


def traffic(
    rng: np.random.Generator,
    spec: DemoDeployment,
    *,
    events: DemoEvents,
    start: datetime,
    days: int,
) -> np.ndarray:
    """Requests per second, one value per minute of the demo."""
    end = start + timedelta(days=days)
    n_min = days * 1440
    t = start.timestamp() + np.arange(n_min) * MINUTE
    hour_of_day = (t % DAY) / HOUR
    daily = 0.3 + 0.7 * ((1 + np.cos(2 * np.pi * (hour_of_day - 20) / 24)) / 2) ** 2
    day_index = np.arange(n_min) // 1440
    weekday = np.array(
        [(start + timedelta(days=int(d))).weekday() for d in range(days)]
    )
    weekly = np.asarray(WEEKLY)[weekday][day_index]
    growth = 1 + 0.05 * (t - end.timestamp()) / (90 * DAY)
    holiday = np.where(
        np.asarray(
            [
                (start + timedelta(days=int(d))).date() == events.holiday
                for d in range(days)
            ]
        )[day_index],
        0.45,
        1.0,
    )
    hourly_noise = np.repeat(rng.lognormal(0.0, 0.04, days * 24), 60)
    rps: np.ndarray = spec.peak_rps * daily * weekly * growth * holiday * hourly_noise
    return rps


def simulate(
    index: int,
    spec: DemoDeployment,
    *,
    events: DemoEvents,
    start: datetime,
    days: int,
    seed: int,
) -> _Simulated:
    rng = np.random.default_rng([seed, index])
    n_hours = days * 24
    n_min = n_hours * 60
    t0 = int(start.timestamp())
    minute_t = t0 + np.arange(n_min, dtype=np.int64) * MINUTE
    rps = traffic(rng, spec, events=events, start=start, days=days)

    incident = np.zeros(n_hours, dtype=bool)
    if spec.name == INCIDENT_DEPLOYMENT:
        hour_t = t0 + np.arange(n_hours) * HOUR
        incident = (hour_t >= events.incident_start.timestamp()) & (
            hour_t < events.incident_end.timestamp()
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
        (minute_t >= events.gap_start.timestamp())
        & (minute_t < events.gap_end.timestamp())
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
    # Drawn and dropped (preemptions used to be drawn here): the draws after
    # it stay what they were, so every series but the preemptions is as before.
    dropped_rate = np.where(incident, 0.02, 0.0005 * utilisation)
    rng.poisson(done * np.repeat(dropped_rate, 60)[None, :])
    # Pods restart now and then (OOM, node drain): the counter resets.
    restarts = rng.random((slots, n_min)) < 1 / (3 * 1440)

    # The hour's median ITL under load (the histogram's, for the deployments
    # without a declared curve): slower as the pods fill, and in the incident.
    loaded_itl = (
        spec.itl_s
        * (1 + 0.6 * utilisation * utilisation)
        * np.where(incident, 1.25, 1.0)
    )

    # Gauges: one deployment-level value per scraped minute.
    sample_t = minute_t + MINUTE // 2
    running_noise = rng.lognormal(0, 0.08, n_min)
    if spec.itl_curve:
        # The declared curve, not itl_s: the batch each pod runs at its rate.
        running = curve_batch(spec, per_pod_rps * spec.gen_mean) * running_noise
        # The hour's ITL scatters a little around the curve (its own stream,
        # so the draws above stay what they were).
        curve_noise = np.random.default_rng([seed, index, 1]).lognormal(
            0.0, 0.02, n_hours
        )
    else:
        # Little's law on the ITL the histogram carries (its mean, as the
        # back-test reads it): a request runs for one step per output token
        # (its prefill step, which makes the first, then one per ITL), so
        # running = tokens/s x mean ITL, as curve_batch has it. On the unloaded
        # itl_s the gauge undercounted the batch the histogram's ITL was
        # measured at (chat's tokens/s came out 1.42x running / mean ITL).
        mean_itl = loaded_itl * math.exp(LATENCY_SIGMA**2 / 2)
        running = per_pod_rps * spec.gen_mean * np.repeat(mean_itl, 60) * running_noise
    kv, running, waiting = kv_cache(spec, running, utilisation, incident)
    # Preempted requests finish later: counted against the minute's finished
    # ones, at the rate the cache's fullness gives (its own stream).
    preemptions = np.random.default_rng([seed, index, 2]).poisson(
        done * preemption_rate(kv)[None, :]
    )
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
            last_reset = np.maximum.accumulate(np.where(resets, np.arange(b - a), -1))
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

    gauges = {
        "replicas": hourly_gauge_stats(
            sample_t[scraped], minute_replicas[scraped].astype(float)
        ),
        "kv": hourly_gauge_stats(sample_t[scraped], kv[scraped]),
        "running": hourly_gauge_stats(sample_t[scraped], running[scraped]),
        "waiting": hourly_gauge_stats(sample_t[scraped], waiting[scraped]),
    }

    # The newest scraped sample of each hour (samples are in time order).
    seen_t = sample_t[scraped]
    newest = dict(zip((seen_t // HOUR * HOUR).tolist(), seen_t.tolist(), strict=True))
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
            last_sample_at=datetime.fromtimestamp(newest[h], UTC),
            **values,
        )
        u = float(utilisation[hi])
        ttft = spec.ttft_s * (1 + 2.0 * u**3) * (2.2 if incident[hi] else 1.0)
        n_req = values["requests_stop"] + values["requests_length"]
        n_tok = max(values["generation_tokens"] - n_req, 0.0)
        if spec.itl_curve:
            # Mean ITL on the curve at the hour's mean running batch per pod.
            mean_itl = float(curve_itl_s(spec, np.asarray(run_s[0]))) * float(
                curve_noise[hi]
            )
            itl_hist = _hist_record(
                spec.name,
                at,
                "itl",
                ITL_BOUNDS,
                n_tok,
                mean_itl / math.exp(CURVE_ITL_SIGMA**2 / 2),
                CURVE_ITL_SIGMA,
            )
            itl = mean_itl
        else:
            itl = float(loaded_itl[hi])
            itl_hist = _hist_record(spec.name, at, "itl", ITL_BOUNDS, n_tok, itl)
        histograms[h] = [
            _hist_record(spec.name, at, "ttft", TTFT_BOUNDS, n_req, ttft),
            itl_hist,
            _hist_record(
                spec.name, at, "e2e", E2E_BOUNDS, n_req, ttft + spec.gen_mean * itl
            ),
        ]
        if spec.itl_curve:
            prompt_mean = values["prompt_tokens"] / n_req if n_req > 0 else 0.0
            if prompt_mean > 0:
                histograms[h].append(_prompt_record(spec.name, at, n_req, prompt_mean))
    slot_hours = {t0 + i * HOUR: int(r) for i, r in enumerate(replicas)}
    activity = {t0 + i * HOUR: float(min(u, 1.0)) for i, u in enumerate(utilisation)}
    return _Simulated(spec, hour_records, histograms, slot_hours, activity)


def devices(simulated: list[_Simulated]) -> dict[int, list[Record]]:
    """DCGM rows for every GPU or MIG instance a replica held in a scraped hour."""
    rows: dict[int, list[Record]] = defaultdict(list)
    mig_power: dict[tuple[int, int], float] = defaultdict(lambda: 70.0)
    for sim in simulated:
        spec = sim.spec
        if not spec.mig_profile:
            continue
        for h, replicas in sim.slot_hours.items():
            for slot in range(replicas):
                gpu = _mig_gpu(spec, slot)
                mig_power[(h, gpu)] += spec.gpu_share * (90 + 250 * sim.activity[h])
    for sim in simulated:
        spec = sim.spec
        for h, record in sim.hour_records.items():
            up_fraction = record.samples / max(record.replicas_mean or 0.0, 1e-9) / 60
            act = sim.activity[h]
            for slot in range(sim.slot_hours[h]):
                if spec.mig_profile:
                    host = f"{spec.host_prefix}10"
                    gpu = _mig_gpu(spec, slot)
                    instance = (
                        "2" if spec.mig_profile.startswith("3g") else str(3 + slot % 2)
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
                        120 + 480 * act if spec.gpus_per_replica > 1 else 40 + 250 * act
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


def _mig_gpu(spec: DemoDeployment, slot: int) -> int:
    # Each GPU of the node is split 3g.40gb + 2g.20gb + 2g.20gb.
    return slot if spec.mig_profile.startswith("3g") else slot // 2


def discovery(end: datetime) -> list[Record]:
    out: list[Record] = []
    for spec in DEPLOYMENTS:
        blocks = spec.kv_tokens // 16
        out.append(
            DiscoveryRecord(
                deployment=spec.name,
                observed_at=end - timedelta(minutes=1),
                engine="vllm",
                engine_generation="v1",
                cache_config={
                    "block_size": "16",
                    "cache_dtype": spec.kv_dtype,
                    "gpu_memory_utilization": "0.9",
                    "num_gpu_blocks": str(blocks),
                    "enable_prefix_caching": "True",
                },
                series_found=VLLM_SERIES,
            )
        )
    return out
