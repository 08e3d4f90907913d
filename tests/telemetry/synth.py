# ruff: noqa: B023  (closures are called inside the loop that defines them)
"""A synthetic fleet written as OpenMetrics, with the hourly truth it implies.

Scrapes every 60 s over three days from T0 (UTC). Every counter increment the
generator draws is remembered, so the truth of an hour is the sum of the
increments of the samples stamped in it: the same rule costapp documents (an
increase belongs to the hour of the sample that shows it; after a scrape gap
the whole jump lands in the first hour with samples again).

chat-v1  vLLM V1 names (plus the deprecated V0 duplicates vLLM 0.10 still
         exports, which must not be counted twice); pods p0, p1 all along, p1
         restarted (counter reset) on day 1 at 12:00:30, p2 born on day 2 at
         06:30.
chat-v0  vLLM V0 names, one pod on MIG instance 1 (3g.40gb) of node-a; a scrape
         gap from day 1 20:17 to day 2 01:17 (five hours without samples).
DCGM     node-a: GPU 0 in MIG mode, instances 1 and 2 (3g.40gb), no GPU_UTIL,
         both repeating the parent's power and energy; node-b: one whole GPU.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

T0 = int(datetime(2024, 3, 4, tzinfo=UTC).timestamp())
STEP = 60
DAYS = 3
N = DAYS * 24 * 3600 // STEP
TIMES = T0 + STEP * np.arange(N)
HOUR = 3600

BOUNDS = {
    "ttft": [0.05, 0.1, 0.25, 0.5, 1.0],
    "itl": [0.01, 0.025, 0.05, 0.1, 0.25],
    "e2e": [1.0, 2.5, 5.0, 10.0, 30.0],
    "queue": [0.01, 0.1, 0.5, 1.0, 5.0],
}
GAP = (T0 + 86400 + 20 * HOUR + 17 * 60, T0 + 2 * 86400 + 1 * HOUR + 17 * 60)
RESET_P1 = T0 + 86400 + 12 * HOUR + 60  # first sample after the restart
BORN_P2 = T0 + 2 * 86400 + 6 * HOUR + 30 * 60


def hour_of(t: float) -> int:
    return int(t // HOUR * HOUR)


@dataclass
class Truth:
    # (deployment, field) -> hour -> value
    counters: dict[tuple[str, str], dict[int, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    # (deployment, metric) -> hour -> le-index -> count (non-cumulative)
    buckets: dict[tuple[str, str], dict[int, np.ndarray]] = field(default_factory=dict)
    # (deployment, gauge) -> slot time -> list of values across pods
    gauges: dict[tuple[str, str], dict[int, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    # (hostname, instance) -> field -> hour -> list or sum
    devices: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = field(
        default_factory=lambda: defaultdict(
            lambda: defaultdict(lambda: defaultdict(list))
        )
    )
    energy: dict[tuple[str, str], dict[int, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    hours: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    def deployment_hour(self, deployment: str, h: int) -> dict[str, float]:
        c = {
            f: per.get(h, 0.0)
            for (d, f), per in self.counters.items()
            if d == deployment
        }
        return c


class Writer:
    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[str]]] = {}

    def add(self, family: str, kind: str, lines: list[str]) -> None:
        self.families.setdefault(family, (kind, []))[1].extend(lines)

    def write(self, path: Path) -> None:
        with path.open("w") as f:
            for family, (kind, lines) in self.families.items():
                f.write(f"# TYPE {family} {kind}\n")
                f.write("\n".join(lines))
                f.write("\n")
            f.write("# EOF\n")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _series_lines(
    name: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray
) -> list[str]:
    lab = _labels(labels)
    # repr: the shortest text that reads back as the same float (exact counts).
    return [
        f"{name}{lab} {x!r} {ts}"
        for ts, x in zip(t.tolist(), np.asarray(v, dtype=float).tolist(), strict=True)
    ]


def _counter_values(inc: np.ndarray, t: np.ndarray, resets: list[int]) -> np.ndarray:
    """Cumulative values; at a reset the counter restarts with that step's increment."""
    values = np.cumsum(inc)
    for r in resets:
        k = int(np.searchsorted(t, r))
        if k < t.size:
            values[k:] = np.cumsum(inc[k:])
    return values


@dataclass
class Pod:
    deployment: str
    name: str
    engine_labels: dict[str, str]
    mask: np.ndarray  # which global scrape slots this pod has samples for
    resets: list[int]
    v1: bool


def generate(out: Path, seed: int = 7) -> Truth:
    rng = np.random.default_rng(seed)
    truth = Truth()
    w = Writer()
    all_slots = np.ones(N, dtype=bool)
    gap = (TIMES >= GAP[0]) & (TIMES < GAP[1])
    pods = [
        Pod(
            "chat-v1",
            "p0",
            {"namespace": "chat", "job": "vllm-v1", "pod": "p0", "engine": "0"},
            all_slots,
            [],
            True,
        ),
        Pod(
            "chat-v1",
            "p1",
            {"namespace": "chat", "job": "vllm-v1", "pod": "p1", "engine": "0"},
            all_slots,
            [RESET_P1],
            True,
        ),
        Pod(
            "chat-v1",
            "p2",
            {"namespace": "chat", "job": "vllm-v1", "pod": "p2", "engine": "0"},
            TIMES >= BORN_P2,
            [],
            True,
        ),
        Pod(
            "chat-v0",
            "q0",
            {"namespace": "batch", "job": "vllm-v0", "pod": "q0"},
            ~gap,
            [],
            False,
        ),
    ]
    base = {"model_name": "m"}
    for pod in pods:
        t = TIMES[pod.mask]
        n = N
        positions = np.flatnonzero(pod.mask)
        alive = TIMES >= TIMES[positions[0]]

        def fold(draws: np.ndarray) -> np.ndarray:
            """Increments as the scrapes see them: what happened while no scrape
            was taken (a gap) shows up in the first sample after it."""
            draws = draws * (alive[:, None] if draws.ndim == 2 else alive)
            cum = np.cumsum(draws, axis=0)[positions]
            out = np.diff(cum, axis=0, prepend=np.zeros_like(cum[:1]))
            return out

        labels = {**pod.engine_labels, **base}
        d = pod.deployment
        hours = (t // HOUR * HOUR).astype(np.int64)
        truth.hours[d].update(hours.tolist())

        def counter(
            name: str,
            field_: str,
            draws: np.ndarray,
            extra: dict[str, str] | None = None,
        ) -> None:
            inc = fold(draws)
            values = _counter_values(inc, t, pod.resets)
            w.add(
                name.removesuffix("_total"),
                "counter",
                _series_lines(name, {**labels, **(extra or {})}, t, values),
            )
            for h, x in zip(hours.tolist(), inc.tolist(), strict=True):
                truth.counters[(d, field_)][h] += x

        load = 1.0 + 0.5 * np.sin((TIMES - T0) / 86400 * 2 * np.pi)
        stop = rng.poisson(3 * load)
        length = rng.poisson(0.3 * load)
        abort = rng.poisson(0.1 * load)
        counter(
            "vllm:request_success_total",
            "requests_stop",
            stop,
            {"finished_reason": "stop"},
        )
        counter(
            "vllm:request_success_total",
            "requests_length",
            length,
            {"finished_reason": "length"},
        )
        counter(
            "vllm:request_success_total",
            "requests_aborted",
            abort,
            {"finished_reason": "abort"},
        )
        finished = stop + length + abort
        counter(
            "vllm:prompt_tokens_total",
            "prompt_tokens",
            finished * 500 + rng.integers(0, 50, n),
        )
        counter(
            "vllm:generation_tokens_total",
            "generation_tokens",
            finished * 120 + rng.integers(0, 20, n),
        )
        counter("vllm:num_preemptions_total", "preemptions", rng.poisson(0.05, n))
        if pod.v1:
            queries = finished * 500
            counter("vllm:prefix_cache_queries_total", "prefix_cache_queries", queries)
            counter(
                "vllm:prefix_cache_hits_total",
                "prefix_cache_hits",
                (queries * 0.3).astype(int),
            )

        m = t.size
        running = rng.integers(0, 20, m).astype(float)
        waiting = rng.integers(0, 4, m).astype(float)
        kv = np.round(rng.uniform(0, 0.9, m), 4)
        gauge_names = [
            ("vllm:num_requests_running", "running", running),
            ("vllm:num_requests_waiting", "waiting", waiting),
        ]
        if pod.v1:
            gauge_names.append(("vllm:kv_cache_usage_perc", "kv", kv))
            # vLLM 0.10 still exported the V0 name: a different value here proves
            # the newest name wins.
            gauge_names.append(("vllm:gpu_cache_usage_perc", "", np.ones(m)))
        else:
            gauge_names.append(("vllm:gpu_cache_usage_perc", "kv", kv))
        for name, key, values in gauge_names:
            w.add(name, "gauge", _series_lines(name, labels, t, values))
            if key:
                for ts, x in zip(t.tolist(), values.tolist(), strict=True):
                    truth.gauges[(d, key)][int(ts)].append(x)

        if pod.v1:
            info = {
                **labels,
                "block_size": "16",
                "cache_dtype": "fp8_e4m3",
                "gpu_memory_utilization": "0.9",
                "num_gpu_blocks": "11560",
            }
            w.add(
                "vllm:cache_config_info",
                "gauge",
                _series_lines("vllm:cache_config_info", info, t, np.ones(m)),
            )

        metrics = ["ttft", "itl", "e2e"] + ([] if pod.v1 else ["queue"])
        for metric in metrics:
            bounds = BOUNDS[metric]
            per_bucket = rng.poisson(1.0 * load[:, None], size=(n, len(bounds) + 1))
            cumulative_le = np.cumsum(fold(per_bucket), axis=1)
            total = cumulative_le[:, -1]
            sums = np.round(total * bounds[2] * 0.8, 6)
            if metric == "itl":
                families = (
                    [
                        "vllm:inter_token_latency_seconds",
                        "vllm:time_per_output_token_seconds",
                    ]
                    if pod.v1
                    else ["vllm:time_per_output_token_seconds"]
                )
            else:
                families = {
                    "ttft": ["vllm:time_to_first_token_seconds"],
                    "e2e": ["vllm:e2e_request_latency_seconds"],
                    "queue": ["vllm:request_queue_time_seconds"],
                }[metric]
            for i, family in enumerate(families):
                # The deprecated duplicate gets doubled counts: if it were summed
                # with the new name the test would see it.
                factor = 1 if i == 0 else 2
                for j, le in enumerate([*bounds, "+Inf"]):
                    values = _counter_values(
                        cumulative_le[:, j] * factor, t, pod.resets
                    )
                    w.add(
                        family,
                        "histogram",
                        _series_lines(
                            f"{family}_bucket", {**labels, "le": str(le)}, t, values
                        ),
                    )
                w.add(
                    family,
                    "histogram",
                    _series_lines(
                        f"{family}_sum",
                        labels,
                        t,
                        _counter_values(sums * factor, t, pod.resets),
                    ),
                )
                w.add(
                    family,
                    "histogram",
                    _series_lines(
                        f"{family}_count",
                        labels,
                        t,
                        _counter_values(total * factor, t, pod.resets),
                    ),
                )
            key = (d, metric)
            acc = truth.buckets.setdefault(key, {})
            for h, row in zip(hours.tolist(), cumulative_le, strict=True):
                acc[h] = acc.get(h, np.zeros(len(bounds) + 1)) + row
            for h, s_, c_ in zip(
                hours.tolist(), sums.tolist(), total.tolist(), strict=True
            ):
                truth.counters[(d, f"{metric}_sum")][h] += s_
                truth.counters[(d, f"{metric}_count")][h] += c_

    # DCGM
    parent_power = np.round(rng.uniform(80, 300, N), 3)
    parent_energy_inc = np.round(parent_power * STEP * 1000)  # mJ
    devices = [
        ("node-a", "GPU-aaaa", "0", "1", "3g.40gb"),
        ("node-a", "GPU-aaaa", "0", "2", "3g.40gb"),
        ("node-b", "GPU-bbbb", "0", "", ""),
    ]
    for host, uuid, gpu, inst, profile in devices:
        labels = {
            "gpu": gpu,
            "UUID": uuid,
            "device": "nvidia0",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": host,
        }
        if inst:
            labels.update({"GPU_I_PROFILE": profile, "GPU_I_ID": inst})
        fields = {
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (
                "gr_engine_active_mean",
                np.round(rng.uniform(0, 1, N), 4),
            ),
            "DCGM_FI_PROF_DRAM_ACTIVE": (
                "dram_active_mean",
                np.round(rng.uniform(0, 1, N), 4),
            ),
            "DCGM_FI_DEV_FB_USED": (
                "fb_used_mib_mean",
                rng.integers(1000, 40000, N).astype(float),
            ),
            "DCGM_FI_DEV_FB_FREE": (
                "fb_free_mib_mean",
                rng.integers(0, 1000, N).astype(float),
            ),
            # MIG rows repeat the parent GPU's power.
            "DCGM_FI_DEV_POWER_USAGE": ("power_w_mean", parent_power),
        }
        if not inst:
            fields["DCGM_FI_DEV_GPU_UTIL"] = (
                "gpu_util_mean",
                rng.integers(0, 101, N).astype(float),
            )
        key = (host, inst)
        hours = (TIMES // HOUR * HOUR).astype(np.int64)
        for name, (field_, values) in fields.items():
            w.add(name, "gauge", _series_lines(name, labels, TIMES, values))
            for h, x in zip(hours.tolist(), values.tolist(), strict=True):
                truth.devices[key][field_][h].append(x)
        energy = np.cumsum(parent_energy_inc)
        # dcgm-exporter speaks the classic text format: no _total suffix, so
        # in OpenMetrics it is declared "unknown".
        w.add(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "unknown",
            _series_lines(
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, TIMES, energy
            ),
        )
        for h, x in zip(hours.tolist(), parent_energy_inc.tolist(), strict=True):
            truth.energy[key][h] += x / 1000
    w.write(out)
    return truth
