"""Scenario in, Result out: the engine's read models (no arithmetic here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from analytics.capacity.catalog import ModelSpec

ROOFLINE = "roofline, uncalibrated"


@dataclass(frozen=True)
class Scenario:
    model: str | ModelSpec
    gpu: str
    mig_profile: str | None = None
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "auto"
    engine_version: str = "0.10.1"
    engine: str | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    enforce_eager: bool = False
    enable_chunked_prefill: bool | None = None
    usage_context: str = "serve"
    prompt_tokens: int = 512
    output_tokens: int = 256
    itl_sla_ms: float = 50.0
    sla_percentile: float = 0.95
    ttft_sla_ms: float | None = None
    target_requests_per_s: float | None = None
    gpu_hour_price: float | None = None
    # vLLM flags and environment that change what it accepts or how it sizes memory.
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; None = the version's default.
    estimate_cudagraphs: bool | None = None
    # VLLM_USE_V2_MODEL_RUNNER; None = the version's default (memory.MRV2_*).
    model_runner_v2: bool | None = None
    kv_cache_memory_bytes: float | None = None  # --kv-cache-memory: skips profiling
    # --num-gpu-blocks-override: the pool is this many blocks whatever the
    # profile says (vLLM v1 kv_cache_utils.get_num_blocks). "Today" carries the
    # pool the running engine reported (cache_config_info's num_gpu_blocks).
    num_gpu_blocks_override: int | None = None
    # Share of prompt tokens served from the prefix cache (telemetry), cuts prefill.
    prefix_cache_hit_rate: float = 0.0
    speculative_decoding: bool = False
    lora: bool = False


@dataclass(frozen=True)
class CalibrationUsed:
    label: str
    kind: str
    fit: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    feasible: bool
    reason: str | None
    kv_bytes_per_token: float
    weights_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    kv_cache_memory_bytes: float
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    max_concurrency_at_max_model_len: float
    max_num_seqs: int
    max_num_batched_tokens: int
    batch_size: int
    decode_step_ms: float
    itl_mean_ms: float
    itl_at_percentile_ms: float
    prefill_ms: float
    ttft_ms: float
    throughput_tokens_per_s: float
    max_requests_per_s_within_sla: float
    replicas: int
    gpus_needed: float
    gpu_share_per_replica: float
    cost_per_hour: float | None
    cost_per_1k_requests: float | None
    cost_per_1m_tokens: float | None
    cost_per_1m_output_tokens: float | None
    gpu_memory_gb: float
    calibration: CalibrationUsed
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # False when vLLM would refuse to start (reason quotes vLLM); see refusals.py.
    starts: bool = True
    # The check that failed ("tp_heads", "max_model_len_exceeds_pool", ...) or None.
    refusal: str | None = None
    # False for what the model does not cover (speculative decoding, LoRA).
    modelled: bool = True
    # The longest max_model_len this pool admits for one request (vLLM V1's
    # estimate_max_model_len, per KV group for sliding-window layers).
    max_model_len_admitted: int = 0
    # What limits the batch (analytics.capacity.binding.BINDING): the KV pool,
    # max_num_seqs, or the ITL SLA at a step spent on memory reads, compute,
    # overhead or prefill; a refusal or an unmet SLA where it does not serve.
    binding: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        scenario = asdict(self.scenario)
        if isinstance(self.scenario.model, ModelSpec):
            scenario["model"] = self.scenario.model.name
        out["scenario"] = scenario
        out["calibration"] = asdict(self.calibration)
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class Delta:
    field: str
    base: float | None
    variant: float | None
    absolute: float | None
    relative: float | None


@dataclass(frozen=True)
class Comparison:
    base: Result
    variants: tuple[Result, ...]
    deltas: tuple[tuple[Delta, ...], ...]
