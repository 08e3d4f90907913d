"""Metric names per serving engine and generation, mapped to our fields.

One table serves both the Prometheus adapter (which names to query, how to
route each returned series) and the /metrics text parser, so a name handled in
one place is handled everywhere.

Names changed across engine versions (vLLM V0 -> V1, SGLang early 2025 -> 0.5).
A field lists its alternatives newest first; when one engine instance exports
several of them (vLLM 0.10 kept the deprecated names next to the new ones), only
the newest is used for that instance, so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["counter", "gauge", "histogram", "info"]

# Finished-request counters carry finished_reason; only stop and length are
# requests, everything else (abort, error) is kept apart.
REASON_FIELDS = {"stop": "requests_stop", "length": "requests_length"}
ABORTED_FIELD = "requests_aborted"

COUNTER_FIELDS = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
)
GAUGE_FIELDS = ("running", "waiting", "kv_cache_usage")
HISTOGRAM_METRICS = (
    "ttft",
    "itl",
    "e2e",
    "queue",
    "prefill",
    "decode",
    "prompt_tokens",
    "generation_tokens",
)


@dataclass(frozen=True)
class Role:
    """What one series name means for us."""

    kind: Kind
    field: (
        str  # a COUNTER_FIELDS / GAUGE_FIELDS name, a histogram metric, "cache_config"
    )
    preference: int = 0  # 0 = newest name of the field
    # For request counters without a finished_reason label (SGLang, TGI).
    fixed_reason: str | None = None
    # For histograms: which part of the family this name is.
    part: Literal["", "bucket", "sum", "count"] = ""
    scale: float = 1.0


@dataclass(frozen=True)
class EngineTable:
    engine: str
    # Names (as stored in Prometheus) -> roles. A name may have several roles:
    # TGI's prompt-length histogram sum is also its prompt-token counter.
    roles: dict[str, tuple[Role, ...]]
    # Labels that tell one replica (engine process) from another are all labels
    # but these; rank labels select the one rank that reports for the replica.
    rank_label: str = ""
    # Names whose presence tells the generation, newest generation first.
    generations: tuple[tuple[str, frozenset[str]], ...] = ()
    # The series whose samples say "this replica was up".
    up_field: str = "running"

    def names(self) -> list[str]:
        return sorted(self.roles)

    def roles_of(self, name: str) -> tuple[Role, ...]:
        return self.roles.get(name, ())

    def generation(self, found: Iterable[str]) -> str:
        present = set(found)
        hits = [g for g, marks in self.generations if marks & present]
        return "+".join(hits)

    def expected(self, generation: str) -> list[str]:
        """Names a deployment of this generation should export (for "missing")."""
        wanted: set[str] = set()
        gens = set(generation.split("+")) if generation else set()
        marks_all = (
            set().union(*(m for _, m in self.generations))
            if self.generations
            else set()
        )
        for name, roles in self.roles.items():
            if name in marks_all:
                own = {g for g, m in self.generations if name in m}
                if gens and not (own & gens):
                    continue
            if any(r.kind == "histogram" and r.part != "bucket" for r in roles):
                continue
            wanted.add(name)
        return sorted(wanted)


def _histogram(
    base: str, metric: str, preference: int = 0
) -> dict[str, tuple[Role, ...]]:
    return {
        f"{base}_bucket": (Role("histogram", metric, preference, part="bucket"),),
        f"{base}_sum": (Role("histogram", metric, preference, part="sum"),),
        f"{base}_count": (Role("histogram", metric, preference, part="count"),),
    }


def _merge(*parts: dict[str, tuple[Role, ...]]) -> dict[str, tuple[Role, ...]]:
    out: dict[str, tuple[Role, ...]] = {}
    for part in parts:
        for name, roles in part.items():
            out[name] = out.get(name, ()) + roles
    return out


VLLM = EngineTable(
    engine="vllm",
    roles=_merge(
        {
            "vllm:request_success_total": (Role("counter", "requests"),),
            "vllm:prompt_tokens_total": (Role("counter", "prompt_tokens"),),
            "vllm:generation_tokens_total": (Role("counter", "generation_tokens"),),
            "vllm:num_preemptions_total": (Role("counter", "preemptions"),),
            # V1 only: prefix cache counted in tokens queried and hit.
            "vllm:prefix_cache_queries_total": (
                Role("counter", "prefix_cache_queries"),
            ),
            "vllm:prefix_cache_hits_total": (Role("counter", "prefix_cache_hits"),),
            "vllm:num_requests_running": (Role("gauge", "running"),),
            "vllm:num_requests_waiting": (Role("gauge", "waiting"),),
            # V1 name first, V0 name second: both are fractions 0..1.
            "vllm:kv_cache_usage_perc": (Role("gauge", "kv_cache_usage", 0),),
            "vllm:gpu_cache_usage_perc": (Role("gauge", "kv_cache_usage", 1),),
            "vllm:cache_config_info": (Role("info", "cache_config"),),
        },
        _histogram("vllm:time_to_first_token_seconds", "ttft"),
        _histogram("vllm:inter_token_latency_seconds", "itl", 0),
        _histogram("vllm:time_per_output_token_seconds", "itl", 1),
        _histogram("vllm:e2e_request_latency_seconds", "e2e"),
        _histogram("vllm:request_queue_time_seconds", "queue"),
        _histogram("vllm:request_prefill_time_seconds", "prefill"),
        _histogram("vllm:request_decode_time_seconds", "decode"),
        _histogram("vllm:request_prompt_tokens", "prompt_tokens"),
        _histogram("vllm:request_generation_tokens", "generation_tokens"),
    ),
    generations=(
        (
            "v1",
            frozenset(
                {
                    "vllm:kv_cache_usage_perc",
                    "vllm:inter_token_latency_seconds_bucket",
                    "vllm:prefix_cache_queries_total",
                    "vllm:prefix_cache_hits_total",
                }
            ),
        ),
        (
            "v0",
            frozenset(
                {
                    "vllm:gpu_cache_usage_perc",
                    "vllm:time_per_output_token_seconds_bucket",
                }
            ),
        ),
    ),
)

SGLANG = EngineTable(
    engine="sglang",
    roles=_merge(
        {
            # 0.5: one counter of finished requests, no finished_reason.
            "sglang:num_requests_total": (
                Role("counter", "requests", 0, fixed_reason="stop"),
            ),
            "sglang:prompt_tokens_total": (
                Role("counter", "prompt_tokens"),
                Role("counter", "prefix_cache_queries"),
            ),
            "sglang:generation_tokens_total": (Role("counter", "generation_tokens"),),
            "sglang:cached_tokens_total": (Role("counter", "prefix_cache_hits"),),
            "sglang:num_running_reqs": (Role("gauge", "running"),),
            "sglang:num_queue_reqs": (Role("gauge", "waiting"),),
            "sglang:token_usage": (Role("gauge", "kv_cache_usage"),),
        },
        _histogram("sglang:time_to_first_token_seconds", "ttft"),
        _histogram("sglang:inter_token_latency_seconds", "itl", 0),
        _histogram("sglang:time_per_output_token_seconds", "itl", 1),
        _histogram("sglang:e2e_request_latency_seconds", "e2e"),
        _histogram("sglang:queue_time_seconds", "queue"),
        _histogram("sglang:prompt_tokens_histogram", "prompt_tokens"),
        _histogram("sglang:generation_tokens_histogram", "generation_tokens"),
        # Early 2025 SGLang has no request counter: its e2e histogram counts
        # every finished request (no stop/length split there).
        {
            "sglang:e2e_request_latency_seconds_count": (
                Role("counter", "requests", 1, fixed_reason="stop"),
            )
        },
    ),
    rank_label="tp_rank",
    generations=(
        (
            "new",
            frozenset(
                {
                    "sglang:num_requests_total",
                    "sglang:inter_token_latency_seconds_bucket",
                    "sglang:queue_time_seconds_bucket",
                }
            ),
        ),
        ("old", frozenset({"sglang:time_per_output_token_seconds_bucket"})),
    ),
)

TGI = EngineTable(
    engine="tgi",
    roles=_merge(
        {
            # metrics-rs counters carry no _total suffix.
            "tgi_request_success": (Role("counter", "requests", fixed_reason="stop"),),
            "tgi_request_failure": (Role("counter", "requests", fixed_reason="abort"),),
            "tgi_batch_current_size": (Role("gauge", "running"),),
            "tgi_queue_size": (Role("gauge", "waiting"),),
        },
        _histogram("tgi_request_duration", "e2e"),
        _histogram("tgi_request_queue_duration", "queue"),
        _histogram("tgi_request_mean_time_per_token_duration", "itl"),
        _histogram("tgi_request_input_length", "prompt_tokens"),
        _histogram("tgi_request_generated_tokens", "generation_tokens"),
        # Token totals are the sums of the per-request length histograms.
        {
            "tgi_request_input_length_sum": (Role("counter", "prompt_tokens"),),
            "tgi_request_generated_tokens_sum": (Role("counter", "generation_tokens"),),
        },
    ),
    generations=(("tgi", frozenset({"tgi_request_success"})),),
)

ENGINES: dict[str, EngineTable] = {t.engine: t for t in (VLLM, SGLANG, TGI)}


@dataclass(frozen=True)
class DeviceField:
    field: str  # DeviceHourRecord field
    kind: Kind
    scale: float = 1.0


# dcgm-exporter names -> DeviceHourRecord fields. GPU_UTIL is absent on MIG
# instances; energy is a counter in millijoules.
DCGM: dict[str, DeviceField] = {
    "DCGM_FI_DEV_GPU_UTIL": DeviceField("gpu_util_mean", "gauge"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": DeviceField("gr_engine_active_mean", "gauge"),
    "DCGM_FI_PROF_DRAM_ACTIVE": DeviceField("dram_active_mean", "gauge"),
    "DCGM_FI_DEV_FB_USED": DeviceField("fb_used_mib_mean", "gauge"),
    "DCGM_FI_DEV_FB_FREE": DeviceField("fb_free_mib_mean", "gauge"),
    "DCGM_FI_DEV_POWER_USAGE": DeviceField("power_w_mean", "gauge"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": DeviceField("energy_j", "counter", 1e-3),
}
# The series whose samples say "this GPU or MIG instance was up": FB_USED is
# reported for whole GPUs and MIG instances alike.
DCGM_UP = "DCGM_FI_DEV_FB_USED"


@dataclass(frozen=True)
class DeviceKey:
    hostname: str
    gpu_uuid: str
    gpu_instance_id: str = ""
    gpu_index: int = 0
    gpu_model: str = ""
    mig_profile: str = ""

    @property
    def gpu_share(self) -> float:
        """GPU-equivalents: a MIG instance is its compute slices over 7."""
        if not self.mig_profile:
            return 1.0
        try:
            return int(self.mig_profile.split("g.", 1)[0]) / 7
        except ValueError:
            return 1.0


def device_key(labels: dict[str, str]) -> DeviceKey:
    """Which GPU or MIG instance a DCGM series is about."""
    hostname = (
        labels.get("Hostname")
        or labels.get("hostname")
        or labels.get("kubernetes_node")
        or labels.get("instance", "")
    )
    try:
        index = int(labels.get("gpu", "0"))
    except ValueError:
        index = 0
    return DeviceKey(
        hostname=hostname,
        gpu_uuid=labels.get("UUID", labels.get("uuid", "")),
        gpu_instance_id=labels.get("GPU_I_ID", ""),
        gpu_index=index,
        gpu_model=labels.get("modelName", ""),
        mig_profile=labels.get("GPU_I_PROFILE", ""),
    )


def replica_key(
    labels: dict[str, str], *, table: EngineTable
) -> tuple[tuple[str, str], ...]:
    """Labels that identify one engine instance (not the metric's own labels)."""
    drop = {"__name__", "le", "finished_reason", table.rank_label}
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def keeps_rank(labels: dict[str, str], *, table: EngineTable) -> bool:
    """SGLang repeats scheduler metrics per tensor-parallel rank: keep rank 0."""
    if not table.rank_label:
        return True
    return labels.get(table.rank_label, "0") == "0"


@dataclass(frozen=True)
class NamesUsed:
    found: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    generation: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def names_used(table: EngineTable, found: Iterable[str]) -> NamesUsed:
    present = sorted(set(found) & set(table.roles))
    generation = table.generation(present)
    missing = [n for n in table.expected(generation) if n not in present]
    return NamesUsed(tuple(present), tuple(missing), generation)
