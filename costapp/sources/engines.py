"""Metric names per serving engine and generation, mapped to our fields.

One table serves both the Prometheus adapter (which names to query, how to
route each returned series) and the /metrics text parser, so a name handled in
one place is handled everywhere.

Names changed across engine versions (vLLM V0 -> V1 -> 0.12, SGLang early
2025 -> 0.5, and its two prefixes). A field lists its alternatives newest first;
when one engine instance exports several of them (vLLM 0.9.2-0.11 kept the
deprecated names next to the new ones), only the newest is used for that
instance, so nothing is counted twice. Series we recognise but have no stored
field for yet are declared apart (``EngineTable.declared``), with their meaning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from costapp.catalog import mig_slices_per_gpu
from costapp.sources.engine_declared import (
    SGLANG_REALTIME_TOKENS,
    VLLM_BY_SOURCE,
    VLLM_DECLARED,
    Declared,
)

Kind = Literal["counter", "gauge", "histogram", "info"]

# Finished-request counters carry finished_reason; only stop and length are
# requests, everything else (abort, error) is kept apart.
REASON_FIELDS = {"stop": "requests_stop", "length": "requests_length"}
ABORTED_FIELD = "requests_aborted"
# vLLM's prompt tokens by where they came from (vllm-project/vllm#33290): the
# three add up to prompt_tokens_total. One field per source; a source not
# listed here is not stored.
PROMPT_SOURCE_LABEL = "source"
PROMPT_SOURCE_FIELDS = {
    "local_compute": "prompt_tokens_computed",
    "local_cache_hit": "prompt_tokens_cache_hit",
    "external_kv_transfer": "prompt_tokens_transferred",
}

COUNTER_FIELDS = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    *PROMPT_SOURCE_FIELDS.values(),
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

# Prefill/decode disaggregation: the engines of both pools count every
# request (a prefill engine serves it with max_tokens=1 and finishes it for
# "length"; the decode engine counts the transferred KV as prompt tokens of
# its own). The fields only the prefill engines measure: the prompt, where
# its tokens came from, the prefix cache and prefill time. Every other field
# is the decode engines', which hold the request from its first token to its
# last; replicas (GPU-seconds) are counted in both.
PREFILL_POOL_FIELDS = frozenset(
    {"prompt_tokens", "prompt_sources", "prefix_cache_queries",
     "prefix_cache_hits", "prefill"}
)  # fmt: skip


@dataclass(frozen=True)
class Role:
    """What one series name means for us."""

    kind: Kind
    # A COUNTER_FIELDS / GAUGE_FIELDS name, a histogram metric,
    # "cache_config", or "prompt_sources" (the field is in ``field_label``).
    field: str
    preference: int = 0  # 0 = newest name of the field
    # For request counters without a finished_reason label (SGLang, TGI).
    fixed_reason: str | None = None
    # For a counter whose label names the field (``PROMPT_SOURCE_FIELDS``):
    # the label; its values map to fields, others are not stored.
    field_label: str = ""
    # For histograms: which part of the family this name is.
    part: Literal["", "bucket", "sum", "count"] = ""
    scale: float = 1.0
    releases: str = ""  # the engine releases that export this name


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
    # Recognised, not stored (not queried from Prometheus either).
    declared: dict[str, Declared] = field(default_factory=dict)

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


_HISTOGRAM_PARTS: tuple[Literal["bucket", "sum", "count"], ...] = (
    "bucket",
    "sum",
    "count",
)


def _histogram(
    base: str, metric: str, preference: int = 0, *, releases: str = ""
) -> dict[str, tuple[Role, ...]]:
    return {
        f"{base}_{part}": (
            Role("histogram", metric, preference, part=part, releases=releases),
        )
        for part in _HISTOGRAM_PARTS
    }


def _merge(*parts: dict[str, tuple[Role, ...]]) -> dict[str, tuple[Role, ...]]:
    out: dict[str, tuple[Role, ...]] = {}
    for part in parts:
        for name, roles in part.items():
            out[name] = out.get(name, ()) + roles
    return out


# vLLM releases, from its v1/metrics/loggers.py and docs/design/metrics.md:
# gpu_cache_usage_perc and gpu_prefix_cache_{queries,hits} were renamed in
# 0.9.2 (both names exported until 0.10.x), hidden behind
# --show-hidden-metrics-for-version in 0.11 and removed in 0.12.
# time_per_output_token_seconds was deprecated in 0.11 for
# inter_token_latency_seconds (the same samples), hidden in 0.12 and removed
# on main in January 2026.
_VLLM_RENAMED = "0.9.2+"
_VLLM_OLD_CACHE = "V1 to 0.10.x (0.11 only when shown as hidden); removed in 0.12"

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
                Role("counter", "prefix_cache_queries", 0, releases=_VLLM_RENAMED),
            ),
            "vllm:prefix_cache_hits_total": (
                Role("counter", "prefix_cache_hits", 0, releases=_VLLM_RENAMED),
            ),
            # The first V1 releases (0.7) counted these in blocks, later ones
            # in tokens; nothing in the series tells which (docs/telemetry.md).
            "vllm:gpu_prefix_cache_queries_total": (
                Role("counter", "prefix_cache_queries", 1, releases=_VLLM_OLD_CACHE),
            ),
            "vllm:gpu_prefix_cache_hits_total": (
                Role("counter", "prefix_cache_hits", 1, releases=_VLLM_OLD_CACHE),
            ),
            "vllm:num_requests_running": (Role("gauge", "running"),),
            "vllm:num_requests_waiting": (Role("gauge", "waiting"),),
            # Both are fractions 0..1 of the KV cache.
            "vllm:kv_cache_usage_perc": (
                Role("gauge", "kv_cache_usage", 0, releases=_VLLM_RENAMED),
            ),
            "vllm:gpu_cache_usage_perc": (
                Role("gauge", "kv_cache_usage", 1, releases="V0; " + _VLLM_OLD_CACHE),
            ),
            "vllm:cache_config_info": (Role("info", "cache_config"),),
            # Routed by its source label to PROMPT_SOURCE_FIELDS. Its
            # local_cache_hit is the same tokens as prefix_cache_hits_total
            # (stored there too, from that series): the two are never added.
            "vllm:prompt_tokens_by_source_total": (
                Role(
                    "counter",
                    "prompt_sources",
                    field_label=PROMPT_SOURCE_LABEL,
                    releases=VLLM_BY_SOURCE,
                ),
            ),
        },
        _histogram("vllm:time_to_first_token_seconds", "ttft"),
        _histogram("vllm:inter_token_latency_seconds", "itl", 0, releases="0.11+"),
        _histogram(
            "vllm:time_per_output_token_seconds",
            "itl",
            1,
            releases="V0 to 0.11 (hidden in 0.12; removed January 2026)",
        ),
        _histogram("vllm:e2e_request_latency_seconds", "e2e"),
        _histogram("vllm:request_queue_time_seconds", "queue"),
        _histogram("vllm:request_prefill_time_seconds", "prefill"),
        _histogram("vllm:request_decode_time_seconds", "decode"),
        _histogram("vllm:request_prompt_tokens", "prompt_tokens"),
        _histogram("vllm:request_generation_tokens", "generation_tokens"),
    ),
    generations=(
        # Prompt tokens by source: a mark of its own, so that an older V1
        # instance is never told the series is missing.
        ("prompt-sources", frozenset({"vllm:prompt_tokens_by_source_total"})),
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
    declared=VLLM_DECLARED,
)

# SGLang names its series "sglang:..."; "sglang_..." is what sgl-router's
# aggregated /engine_metrics and the dashboards built on it carry (llm-d
# #1970), and what dynamo published before #5701. Every SGLang name is
# accepted under both prefixes; an instance seen under both is read under the
# engine's own.
SGLANG_PREFIX = "sglang:"
SGLANG_OTHER_PREFIXES = ("sglang_",)


def _respelled(name: str) -> list[str]:
    """A name and its other spellings, the engine's own first."""
    if not name.startswith(SGLANG_PREFIX):
        return [name]
    rest = name.removeprefix(SGLANG_PREFIX)
    return [name] + [p + rest for p in SGLANG_OTHER_PREFIXES]


def _any_prefix_roles(
    roles: dict[str, tuple[Role, ...]],
) -> dict[str, tuple[Role, ...]]:
    """Each name under every prefix. A newer name still wins over an older
    one (preference doubled); between spellings of one name, the engine's."""
    out: dict[str, tuple[Role, ...]] = {}
    for name, own in roles.items():
        for rank, spelled in enumerate(_respelled(name)):
            out[spelled] = tuple(
                replace(r, preference=2 * r.preference + rank) for r in own
            )
    return out


def _any_prefix_names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(s for n in names for s in _respelled(n))


SGLANG = EngineTable(
    engine="sglang",
    roles=_any_prefix_roles(
        _merge(
            {
                # 0.5: one counter of finished requests, no finished_reason.
                "sglang:num_requests_total": (
                    Role("counter", "requests", 0, fixed_reason="stop"),
                ),
                "sglang:prompt_tokens_total": (
                    Role("counter", "prompt_tokens"),
                    Role("counter", "prefix_cache_queries"),
                ),
                "sglang:generation_tokens_total": (
                    Role("counter", "generation_tokens"),
                ),
                "sglang:cached_tokens_total": (Role("counter", "prefix_cache_hits"),),
                "sglang:num_running_reqs": (Role("gauge", "running"),),
                "sglang:num_queue_reqs": (Role("gauge", "waiting"),),
                "sglang:token_usage": (Role("gauge", "kv_cache_usage"),),
                # Static gauges: the served max_model_len and the KV pool in
                # tokens (prometheus/statics.py reads them once, at discovery).
                "sglang:context_len": (Role("info", "max_model_len"),),
                "sglang:max_total_num_tokens": (Role("info", "max_total_num_tokens"),),
            },
            _histogram("sglang:time_to_first_token_seconds", "ttft"),
            _histogram("sglang:inter_token_latency_seconds", "itl", 0, releases="0.5+"),
            _histogram(
                "sglang:time_per_output_token_seconds",
                "itl",
                1,
                releases="up to early 2025",
            ),
            _histogram("sglang:e2e_request_latency_seconds", "e2e"),
            _histogram("sglang:queue_time_seconds", "queue"),
            _histogram("sglang:prompt_tokens_histogram", "prompt_tokens"),
            _histogram("sglang:generation_tokens_histogram", "generation_tokens"),
            # Early 2025 SGLang has no request counter: its e2e histogram
            # counts every finished request (no stop/length split there).
            {
                "sglang:e2e_request_latency_seconds_count": (
                    Role("counter", "requests", 1, fixed_reason="stop"),
                )
            },
        )
    ),
    rank_label="tp_rank",
    generations=(
        (
            "new",
            _any_prefix_names(
                {
                    "sglang:num_requests_total",
                    "sglang:inter_token_latency_seconds_bucket",
                    "sglang:queue_time_seconds_bucket",
                }
            ),
        ),
        ("old", _any_prefix_names({"sglang:time_per_output_token_seconds_bucket"})),
    ),
    declared={
        spelled: SGLANG_REALTIME_TOKENS
        for spelled in _respelled("sglang:realtime_tokens_total")
    },
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


# -- dcgm-exporter ----------------------------------------------------------
#
# What changed, release by release (the exporter's tags are
# <DCGM version>-<exporter version>; sources in docs/telemetry.md):
# - up to 3.3.6-3.4.2: the default counters file lists the PCIe rates as
#   DCGM_FI_DEV_PCIE_{TX,RX}_THROUGHPUT "(in KB)", typed counter; no DCP fields.
# - 3.3.7-3.5.0 (NVIDIA/dcgm-exporter#357, 219eb08): they become
#   DCGM_FI_PROF_PCIE_{TX,RX}_BYTES, still typed *counter* though DCGM defines
#   them as bytes per second over the sample period (#87, #88); counter files
#   copied from these releases still say counter.
# - 4.0.0-4.0.1 (5f9250c): PROF_PCIE_* typed gauge "in bytes per second";
#   GR_ENGINE_ACTIVE, PIPE_TENSOR_ACTIVE and DRAM_ACTIVE (ratios 0..1) in the
#   defaults; FB "in MiB". 4.3.1-4.4.0 (6949141) adds FB_RESERVED (MiB).
# - 4.6.0-4.8.3 (#711, 2026-07-14) ships #655 (d5e5f51): the label Hostname
#   is renamed hostname on every series.
# - DCGM 4.7 removed DCGM_FI_DEV_PCIE_{TX,RX}_THROUGHPUT: 4.8.4 refuses to
#   start with them in its counter file (netdata/netdata#23964).
# GPU_UTIL stays a percentage, FB_* MiB and TOTAL_ENERGY_CONSUMPTION mJ in
# every default file up to 4.5.3-4.8.2; no release read changes those units.

Semantics = Literal["gauge", "counter", "rate"]


@dataclass(frozen=True)
class DcgmField:
    """One exporter field as we read it. ``kind`` is what DCGM defines the
    field to be, never the scrape's ``# TYPE``: a rate (bytes per second) read
    as a counter would turn into nonsense increases."""

    field: str | None  # DeviceHourRecord field; None: known, not stored
    kind: Semantics
    unit: str  # as the exporter sends it
    scale: float = 1.0  # exporter unit -> the stored unit
    releases: str = "every release"
    # Rank as the "this GPU or MIG instance was up" series (0 first).
    up: int | None = None


DCGM_FIELDS: dict[str, DcgmField] = {
    # FB_USED first: reported for whole GPUs and MIG instances alike; but some
    # exporters leave FB_* out on H100 MIG instances (NVIDIA/dcgm-exporter
    # #512) and counter files differ, so each of the next stands in for it.
    "DCGM_FI_DEV_FB_USED": DcgmField("fb_used_mib_mean", "gauge", "MiB", up=0),
    "DCGM_FI_DEV_FB_FREE": DcgmField("fb_free_mib_mean", "gauge", "MiB", up=1),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": DcgmField(
        "gr_engine_active_mean", "gauge", "ratio 0..1", releases="default 4.0+", up=2
    ),
    # Absent on MIG instances.
    "DCGM_FI_DEV_GPU_UTIL": DcgmField("gpu_util_mean", "gauge", "%", up=3),
    # MIG rows repeat the parent GPU's power and energy.
    "DCGM_FI_DEV_POWER_USAGE": DcgmField("power_w_mean", "gauge", "W", up=4),
    "DCGM_FI_PROF_DRAM_ACTIVE": DcgmField(
        "dram_active_mean", "gauge", "ratio 0..1", releases="default 4.0+"
    ),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": DcgmField(
        "energy_j", "counter", "mJ", 1e-3
    ),
    # Known, not stored: declared so that nothing reads them by their # TYPE.
    "DCGM_FI_PROF_PCIE_TX_BYTES": DcgmField(
        None, "rate", "B/s", releases="default 3.3.7-3.5.0+"
    ),
    "DCGM_FI_PROF_PCIE_RX_BYTES": DcgmField(
        None, "rate", "B/s", releases="default 3.3.7-3.5.0+"
    ),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": DcgmField(None, "rate", "B/s"),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": DcgmField(None, "rate", "B/s"),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": DcgmField(
        None, "rate", "KB/s", releases="default up to 3.3.6-3.4.2; gone in DCGM 4.7"
    ),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": DcgmField(
        None, "rate", "KB/s", releases="default up to 3.3.6-3.4.2; gone in DCGM 4.7"
    ),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": DcgmField(None, "counter", "counts"),
}
# The names read from Prometheus: the stored fields.
DCGM: dict[str, DcgmField] = {n: f for n, f in DCGM_FIELDS.items() if f.field}
DCGM_UP: dict[str, int] = {n: f.up for n, f in DCGM.items() if f.up is not None}


@dataclass(frozen=True)
class ExporterGeneration:
    name: str  # shown on the telemetry page and kept on the run
    releases: str
    hostname_label: str
    source: str


DCGM_EXPORTER_GENERATIONS: tuple[ExporterGeneration, ...] = (
    ExporterGeneration(
        "4.8.3+",
        "4.6.0-4.8.3 (July 2026) and later",
        "hostname",
        "NVIDIA/dcgm-exporter#655, released in #711",
    ),
    ExporterGeneration(
        "to 4.8.2",
        "up to 4.5.3-4.8.2 (May 2026)",
        "Hostname",
        "NVIDIA/dcgm-exporter render_metrics.go before d5e5f51",
    ),
)
# A label the exporter renamed -> its other spelling, both ways: a selector
# written for either generation is checked against the other.
DCGM_LABEL_RENAMES: dict[str, str] = {"Hostname": "hostname", "hostname": "Hostname"}


def dcgm_exporter_generations(
    label_sets: Iterable[dict[str, str]],
) -> list[ExporterGeneration]:
    """Which exporter generations wrote these series, by their host label;
    none when no series carries one (--no-hostname, or relabelled)."""
    labels = {k for labels in label_sets for k in labels}
    return [g for g in DCGM_EXPORTER_GENERATIONS if g.hostname_label in labels]


def dcgm_exporter_generation(label_sets: Iterable[dict[str, str]]) -> str:
    return " and ".join(g.name for g in dcgm_exporter_generations(label_sets))


# GPU_I_PROFILE as the exporter reports it: "3g.40gb", "1g.10gb+me",
# "1c.3g.40gb" (a compute instance in a 3g GPU instance), and memory sizes
# NVIDIA's tables do not list: "1g.11gb" for H100 NVL's 1g.12gb
# (NVIDIA/dcgm-exporter#544), "7g.79gb" for A100's 7g.80gb (#713). The compute
# slices are what the cost share is made of; the memory part is not trusted.
_MIG_PROFILE = re.compile(r"^(?:\d+c\.)?(\d+)g\.\d+gb(?:[+-][a-z]+)*$")
MIG_SLICES = 7


def mig_slices(profile: str) -> int | None:
    """Compute slices of a GPU instance profile; None when not one."""
    m = _MIG_PROFILE.match(profile.strip().lower())
    if m is None:
        return None
    slices = int(m.group(1))
    return slices if 1 <= slices <= MIG_SLICES else None


@dataclass(frozen=True)
class DeviceKey:
    hostname: str
    gpu_uuid: str
    gpu_instance_id: str = ""
    gpu_index: int = 0
    gpu_model: str = ""
    mig_profile: str = ""

    @property
    def gpu_share(self) -> float | None:
        """GPU-equivalents: a MIG instance is its compute slices over its GPU's;
        None for a profile we cannot read (its GPU-seconds are unknown)."""
        if not self.mig_profile:
            return 1.0
        slices = mig_slices(self.mig_profile)
        return None if slices is None else slices / mig_slices_per_gpu(self.gpu_model)


def device_key(labels: dict[str, str]) -> DeviceKey:
    """Which GPU or MIG instance a DCGM series is about."""
    hostname = (
        labels.get("hostname")
        or labels.get("Hostname")
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
    drop = {"__name__", "le", "finished_reason", PROMPT_SOURCE_LABEL, table.rank_label}
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def counter_field(role: Role, labels: dict[str, str]) -> str | None:
    """The stored field a counter series adds to: finished requests by their
    reason, prompt tokens by their source (None: a source not stored)."""
    if role.field == "requests":
        reason = role.fixed_reason or labels.get("finished_reason", "")
        return REASON_FIELDS.get(reason, ABORTED_FIELD)
    if role.field_label:
        return PROMPT_SOURCE_FIELDS.get(labels.get(role.field_label, ""))
    return role.field


def keeps_rank(labels: dict[str, str], *, table: EngineTable) -> bool:
    """SGLang repeats scheduler metrics per tensor-parallel rank: keep rank 0."""
    if not table.rank_label:
        return True
    return labels.get(table.rank_label, "0") == "0"
