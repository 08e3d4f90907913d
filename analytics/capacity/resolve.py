"""Resolution: names and defaults -> numbers, one numpy column per field.

Static fields (model, GPU, dtypes, version, TP) are resolved once per distinct
combination; numeric fields are validated and turned into float arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import memory as mem
from analytics.capacity import refusals
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
    Calibration,
)
from analytics.capacity.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from analytics.capacity.scenario import ROOFLINE, Scenario
from analytics.errors import InvalidInput

_STATIC_KEYS = (
    "model", "gpu", "mig_profile", "tp", "weight_dtype", "kv_dtype",
    "engine_version", "engine", "data_parallel_size", "enable_expert_parallel",
)  # fmt: skip


def _model_of(value: str | ModelSpec) -> ModelSpec:
    return value if isinstance(value, ModelSpec) else get_model(str(value))


def _find_calibration(
    calibrations: Sequence[Calibration],
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    mig_profile: str | None,
    tp: int,
    weight_dtype: str,
    kv_dtype: str,
    engine_version: str,
) -> tuple[Calibration | None, list[str]]:
    notes: list[str] = []
    best: Calibration | None = None
    for cal in calibrations:
        key = cal.key
        same_target = key.gpu in {gpu.name, *gpu.aliases} and (
            key.mig_profile or None
        ) == (mig_profile or None)
        if not same_target:
            continue
        if cal.kind == HARDWARE_CONSTANTS:
            if best is None:
                best = cal
            continue
        if (
            key.model == model.name
            and (key.weight_dtype or weight_dtype) == weight_dtype
            and (key.kv_dtype or kv_dtype) == kv_dtype
            and (key.tp or tp) == tp
        ):
            if best is None or best.kind == HARDWARE_CONSTANTS:
                best = cal
                notes = []
                if key.engine_version and key.engine_version != engine_version:
                    notes.append(
                        f"calibration measured on vLLM {key.engine_version}, "
                        f"scenario asks for {engine_version}"
                    )
    return best, notes


def _resolve_static(
    combo: Mapping[str, Any], calibrations: Sequence[Calibration]
) -> dict[str, Any]:
    """Everything that depends only on names (model, GPU, dtypes, version, TP)."""
    model = _model_of(combo["model"])
    gpu = get_gpu(str(combo["gpu"]))
    raw_tp = combo["tp"]
    if isinstance(raw_tp, str | bool) or raw_tp is None:
        raise InvalidInput("tp", raw_tp, "must be a positive integer")
    mig_name = combo.get("mig_profile") or None
    expert_parallel = bool(combo.get("enable_expert_parallel") or False)
    refusal, warnings = refusals.check_static(
        model,
        tp=raw_tp,
        mig_profile=mig_name,
        data_parallel_size=combo.get("data_parallel_size") or 1,
        enable_expert_parallel=expert_parallel,
    )
    # A refused row still gets numbers (with TP 1, DP 1) so the grid stays
    # rectangular; its reason says vLLM does not start, and nothing ranks it.
    tp = 1 if refusal else int(float(raw_tp))
    dp = 1 if refusal else int(float(combo.get("data_parallel_size") or 1))
    version = mem.parse_engine_version(combo["engine_version"], combo.get("engine"))
    weight_dtype = mem.weight_dtype_key(combo["weight_dtype"])
    kv_dtype = str(combo["kv_dtype"]).lower()
    kv_bytes = mem.kv_dtype_bytes(kv_dtype, version)
    if kv_dtype == "auto" and weight_dtype == "fp32":
        # vLLM's cache_dtype "auto" is the model's dtype: float32 KV, 4 bytes.
        kv_bytes = 4.0
        warnings.append(
            "fp32 weights: activations and compute are modelled as 16-bit "
            "(float32 matmuls run well below the bf16 peak), so speed is optimistic"
        )

    if mig_name:
        profile = gpu.mig_profile(str(mig_name))
        total_memory = float(profile.usable_memory_bytes)
        share = profile.compute_slices / gpu.mig_slices
        if not profile.verified:
            warnings.append(
                f"usable memory of {gpu.name} {profile.name} is not verified on a device"
            )
        slices = profile.compute_slices
    else:
        total_memory = float(gpu.memory_bytes)
        share = 1.0
        slices = gpu.mig_slices
    if not gpu.memory_verified and not mig_name:
        warnings.append(f"memory size of {gpu.name} is unverified")

    body_bytes, embed_bytes = mem.WEIGHT_DTYPES[weight_dtype]
    embed_params = model.vocab * model.hidden * (1 if model.tie_embeddings else 2)
    fp8_compute = weight_dtype == "fp8" and gpu.peak_fp8_flops
    peak = float(
        gpu.peak_fp8_flops
        if fp8_compute and gpu.peak_fp8_flops
        else gpu.peak_bf16_flops
    )
    if weight_dtype == "fp8" and not gpu.peak_fp8_flops:
        warnings.append(
            f"{gpu.name} has no fp8 tensor cores: fp8 weights run weight-only"
        )

    # Which layers cache the whole context, for sliding-window models.
    window_layers = model.sliding_window_layers
    hybrid_alloc = version.generation == "v1" and version.tuple >= (0, 10, 0)
    if window_layers and not hybrid_alloc:
        warnings.append(
            f"{model.name} uses sliding-window attention on {window_layers} layers; "
            f"vLLM {version.text} ({version.generation}) sizes every layer for the full "
            "context, so the model counts them as full attention"
        )
        window_layers = 0

    if model.is_moe:
        ffn_width = model.moe_intermediate * model.experts_per_token
    else:
        ffn_width = model.intermediate
    bw = gpu.hbm_bandwidth_bytes_per_s * share
    layers = model.layers
    eager = False  # filled per row (enforce_eager is numeric)
    del eager
    cal, cal_notes = _find_calibration(
        calibrations,
        model=model,
        gpu=gpu,
        mig_profile=mig_name,
        tp=int(tp),
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        engine_version=version.text,
    )
    warnings.extend(cal_notes)
    v1 = version.generation == "v1"
    sampler_triton = v1 and version.tuple >= mem.SAMPLER_TRITON_SINCE
    # FlashInfer allreduce+RMSNorm fusion (memory.FI_AR_FUSION_*): TP > 1 on
    # capability 9.0/10.0 boards with DP 1; MIG instances never run TP.
    fi_ar_max_mb = 0.0
    fi_capability = mem.FI_AR_FUSION_BOARDS.get(gpu.name)
    if fi_capability and v1 and version.tuple >= mem.FI_AR_FUSION_SINCE:
        if dp == 1 and not mig_name:
            fi_ar_max_mb = mem.FI_AR_FUSION_MAX_MB[fi_capability].get(int(tp), 0.0)
    if mig_name and (cal is None or cal.kind != ENGINE_MEASUREMENTS):
        warnings.append(
            f"MIG {mig_name} speed is scaled as {slices}/{gpu.mig_slices} of the GPU: "
            "uncalibrated, "
            "real per-instance speed must come from measurements"
        )
    if cal is not None:
        params = cal.params
        label = cal.label
        kind = cal.kind
        fit = cal.fit.as_dict()
    else:
        params = None
        label = ROOFLINE
        kind = "roofline"
        fit = None
    # Expert parallelism as vLLM spreads it: EP = TP x DP ranks, experts whole on a
    # rank; the fullest rank (ceil) sets what every rank must leave for weights.
    experts = model.num_experts
    if expert_parallel and experts and not refusal:
        expert_share = math.ceil(experts / (tp * dp)) / experts
    else:
        expert_share = 1.0 / tp
    return {
        "model_spec": model,
        "gpu_spec": gpu,
        "mig_name": mig_name,
        "refusal": refusal,
        "tp": float(tp),
        "dp": float(dp),
        "expert_share": expert_share,
        # Tokens of all DP ranks meet in one EP group's experts each step.
        "expert_batch_factor": float(dp) if expert_parallel else 1.0,
        "generation_v1": version.generation == "v1",
        "old_v0": version.tuple < (0, 7, 0) and version.generation == "v0",
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: on by default since v0.21.0
        # (its start-up log line says so); V0 and earlier V1 never deducted graphs.
        "graphs_estimated_default": version.generation == "v1"
        and version.tuple >= mem.CUDAGRAPH_ESTIMATE_DEFAULT_SINCE,
        # Sampler share of the profiled peak, by runner (memory.SAMPLER_BYTES_*).
        "sampler_bytes_runner1": mem.SAMPLER_BYTES_V0
        if version.generation == "v0"
        else (
            mem.SAMPLER_BYTES_V1_TRITON
            if sampler_triton
            else mem.SAMPLER_BYTES_V1
            if version.tuple >= mem.SAMPLER_PROFILED_SINCE
            else 0.0
        ),
        # V1 runner's Triton top-k/top-p from 0.17 (dropped for MRV2 rows below).
        "sampler_triton": sampler_triton,
        "sm_count": mem.GPU_SM_COUNT.get(gpu.name, 0) * share,
        # Fused-MoE workspace kept by the WorkspaceManager from 0.14.
        "moe_persistent": version.tuple >= mem.MOE_PERSISTENT_SINCE,
        # FlashInfer allreduce-fusion workspace (bytes of its max size), from 0.17.
        "fi_ar_max_bytes": fi_ar_max_mb * 1024**2,
        "sampler_bytes_mrv2": mem.SAMPLER_BYTES_MRV2
        / (tp if version.tuple >= mem.MRV2_ALL_SINCE else 1),
        "mrv2_default": version.generation == "v1"
        and (
            version.tuple >= mem.MRV2_ALL_SINCE
            or (version.tuple >= mem.MRV2_DENSE_SINCE and not model.is_moe)
        ),
        # NVLink/NVSwitch boards carry the larger per-GPU NCCL footprint under V1
        # (memory.NON_TORCH_TP_NVLINK_V1_TOTAL); MIG instances never run TP.
        "nvlink_v1": version.generation == "v1"
        and gpu.name in mem.NVLINK_BOARDS
        and not mig_name,
        # V0 0.7.2-0.7.x pads MLA entries to 256 bytes (memory.MLA_ALIGN_*).
        "mla_aligned": version.generation == "v0"
        and model.is_mla
        and mem.MLA_ALIGN_SINCE <= version.tuple < mem.MLA_ALIGN_UNTIL,
        "moe_intermediate": model.moe_intermediate if model.is_moe else 0,
        # Expert width split: by TP, or whole on a rank under expert parallelism.
        "expert_tp": 1.0 if expert_parallel and not refusal else float(tp),
        "big_board": (total_memory >= 70 * mem.GiB)
        and not gpu.name.startswith("A100")
        and not mig_name,
        "total_memory": total_memory,
        "gpu_share": share,
        "kv_dtype_bytes": kv_bytes,
        "layers": layers,
        "hidden": model.hidden,
        "vocab": model.vocab,
        "kv_heads": model.kv_heads,
        "head_dim": model.head_dim,
        "heads": model.heads,
        "kv_lora_rank": model.kv_lora_rank,
        "rope_dim": model.qk_rope_head_dim,
        "window": model.sliding_window,
        "window_layers": window_layers,
        "ffn_width": ffn_width,
        "params_total": model.params_total,
        "params_active": model.params_active,
        "expert_params": model.expert_params_total,
        "experts": model.num_experts,
        "top_k": model.experts_per_token,
        "embed_params": embed_params,
        "vision_params": model.vision_params,
        "unquantized_params": model.unquantized_params,
        "body_bytes": body_bytes,
        "embed_bytes": embed_bytes,
        "dequant_scratch": float(model.vocab * model.hidden * 2)
        if weight_dtype == "gguf_q8"
        else 0.0,
        "bw": bw,
        "peak_flops": peak * share,
        "max_position": model.max_position,
        "cal_t0": params.t0_s if params else np.nan,
        "cal_bw": params.bw_eff_bytes_per_s if params else np.nan,
        "cal_fdec": params.decode_flops_eff if params else np.nan,
        "cal_fpre": params.prefill_flops_eff if params else np.nan,
        "cal_p0": params.p0_s if params else np.nan,
        "cal_pct": params.itl_percentile_factor if params else 1.0,
        "cal_stall": params.stall_fraction if params else 1.0,
        "cal_is_engine": bool(cal is not None and cal.kind == ENGINE_MEASUREMENTS),
        "cal_label": label,
        "cal_kind": kind,
        "cal_fit": fit,
        "warnings": tuple(warnings),
    }


_NUMERIC_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(Scenario) if f.name not in _STATIC_KEYS
}


def _frame_from(scenarios: Any) -> pd.DataFrame:
    if isinstance(scenarios, pd.DataFrame):
        frame = scenarios.copy()
    elif isinstance(scenarios, Mapping):
        frame = pd.DataFrame(dict(scenarios))
    else:
        rows = [
            {f.name: getattr(s, f.name) for f in fields(Scenario)}
            if isinstance(s, Scenario)
            else dict(s)
            for s in scenarios
        ]
        frame = pd.DataFrame(rows)
    if "model" not in frame or "gpu" not in frame:
        raise InvalidInput("scenario", list(frame.columns), "needs 'model' and 'gpu'")
    for key in _STATIC_KEYS:
        if key not in frame:
            frame[key] = Scenario.__dataclass_fields__[key].default
    for key, default in _NUMERIC_DEFAULTS.items():
        if key not in frame:
            frame[key] = default
    frame["model"] = [m.name if isinstance(m, ModelSpec) else m for m in frame["model"]]
    _refuse_text_numbers(frame)
    return frame.reset_index(drop=True)


# Scenario fields that hold a number or a flag (their annotations, as text).
_TYPED_FIELDS = {
    f.name: str(f.type).replace(" | None", "")
    for f in fields(Scenario)
    if str(f.type).replace(" | None", "") in {"int", "float", "bool"}
}
_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def _refuse_text_numbers(frame: pd.DataFrame) -> None:
    """A JSON or YAML ``"0.9"`` is text, not a number: refused as vLLM's typed
    arguments would refuse it, never parsed (``"false"`` would read as true).
    Forms parse their text into numbers before they call the engine."""
    for name, kind in _TYPED_FIELDS.items():
        column = frame[name]
        if kind != "bool" and column.dtype == bool:
            raise InvalidInput(
                name,
                bool(column.iloc[0]),
                f"must be {_TYPE_WORDS[kind]}, not true/false",
            )
        if column.dtype != object:
            continue
        for value in column:
            if isinstance(value, str | bytes):
                raise InvalidInput(
                    name, value, f"must be {_TYPE_WORDS[kind]}, not text"
                )
            if kind != "bool" and isinstance(value, bool):
                raise InvalidInput(
                    name, value, f"must be {_TYPE_WORDS[kind]}, not true/false"
                )


def _columns(
    frame: pd.DataFrame,
    calibrations: Sequence[Calibration],
    models_by_name: Mapping[str, ModelSpec],
) -> tuple[dict[str, np.ndarray], list[dict[str, Any]], np.ndarray]:
    """Per-row numpy columns; static fields are resolved once per distinct combo."""
    keys = (
        frame[list(_STATIC_KEYS)]
        .astype(object)
        .where(frame[list(_STATIC_KEYS)].notna(), None)
    )
    combo_tuples = list(map(tuple, keys.to_numpy()))
    uniques: dict[tuple[Any, ...], int] = {}
    index = np.empty(len(frame), dtype=np.int64)
    for i, combo in enumerate(combo_tuples):
        index[i] = uniques.setdefault(combo, len(uniques))
    resolved: list[dict[str, Any]] = []
    for combo in uniques:
        values = dict(zip(_STATIC_KEYS, combo, strict=True))
        values["model"] = models_by_name.get(values["model"], values["model"])
        if values["tp"] is None:
            values["tp"] = 1
        resolved.append(_resolve_static(values, calibrations))
    cols: dict[str, np.ndarray] = {}
    numeric_static = [
        k
        for k, v in resolved[0].items()
        if isinstance(v, bool | int | float | np.integer | np.floating)
    ]
    for key in numeric_static:
        table = np.array([r[key] for r in resolved], dtype=np.float64)
        cols[key] = table[index]
    refused = [r["refusal"] for r in resolved]
    cols["static_refusal"] = np.array(
        [r.code if r else "" for r in refused], dtype=object
    )[index]

    def num(
        name: str, *, allow_none: bool = False, default: float = np.nan
    ) -> np.ndarray:
        series = frame[name]
        if allow_none:
            series = series.where(series.notna(), default)
        try:
            return series.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            bad = next(v for v in series if not _is_number(v))
            raise InvalidInput(name, bad, "must be a number") from exc

    for name in (
        "gpu_memory_utilization",
        "block_size",
        "prompt_tokens",
        "output_tokens",
        "itl_sla_ms",
        "sla_percentile",
    ):
        cols[name] = num(name)
    cols["max_model_len"] = num("max_model_len", allow_none=True)
    cols["max_num_seqs"] = num("max_num_seqs", allow_none=True)
    cols["max_num_batched_tokens"] = num("max_num_batched_tokens", allow_none=True)
    cols["ttft_sla_ms"] = num("ttft_sla_ms", allow_none=True)
    cols["target_rps"] = num("target_requests_per_s", allow_none=True)
    cols["price"] = num("gpu_hour_price", allow_none=True)
    cols["kv_memory_given"] = num("kv_cache_memory_bytes", allow_none=True)
    cols["blocks_given"] = num("num_gpu_blocks_override", allow_none=True)
    cols["prefix_hit"] = num("prefix_cache_hit_rate", allow_none=True, default=0.0)
    for name in (
        "enforce_eager", "allow_long_max_model_len", "speculative_decoding", "lora",
    ):  # fmt: skip
        cols[name] = _flags(frame[name])
    chunked = frame["enable_chunked_prefill"]
    cols["chunked_given"] = chunked.notna().to_numpy()
    cols["chunked_value"] = _flags(chunked)
    runner = frame["model_runner_v2"]
    mrv2 = np.where(
        runner.notna().to_numpy(), _flags(runner), cols["mrv2_default"] > 0
    ) & (cols["generation_v1"] > 0)
    cols["sampler_bytes"] = np.where(
        mrv2, cols["sampler_bytes_mrv2"], cols["sampler_bytes_runner1"]
    )
    cols["sampler_triton"] = np.where(mrv2, 0.0, cols["sampler_triton"])
    graphs = frame["estimate_cudagraphs"]
    cols["graphs_estimated"] = np.where(
        graphs.notna().to_numpy(), _flags(graphs), cols["graphs_estimated_default"] > 0
    )
    cols["offline"] = (frame["usage_context"].astype(str) == "offline").to_numpy()
    _validate_numbers(frame, cols)
    return cols, resolved, index


def _flags(series: pd.Series) -> np.ndarray:
    return np.array(
        [bool(v) if v is not None and v == v else False for v in series], dtype=bool
    )


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _first_bad(frame: pd.DataFrame, name: str, mask: np.ndarray) -> Any:
    value = frame[name].to_numpy()[np.flatnonzero(mask)[0]]
    return value.item() if isinstance(value, np.generic) else value


def _validate_numbers(frame: pd.DataFrame, c: Mapping[str, np.ndarray]) -> None:
    checks = [
        (
            "gpu_memory_utilization",
            ~((c["gpu_memory_utilization"] > 0) & (c["gpu_memory_utilization"] <= 1)),
            "must be in (0, 1]",
        ),
        (
            "block_size",
            ~np.isin(c["block_size"], [1, 8, 16, 32, 64, 128, 256]),
            "must be one of 8, 16, 32, 64, 128 (vLLM block sizes)",
        ),
        ("prompt_tokens", ~(c["prompt_tokens"] >= 1), "must be >= 1"),
        ("output_tokens", ~(c["output_tokens"] >= 1), "must be >= 1"),
        ("itl_sla_ms", ~(c["itl_sla_ms"] > 0), "must be > 0"),
        (
            "sla_percentile",
            ~((c["sla_percentile"] > 0) & (c["sla_percentile"] < 1)),
            "must be in (0, 1), e.g. 0.95",
        ),
        ("max_model_len", c["max_model_len"] < 16, "must be >= 16 when given"),
        ("max_num_seqs", c["max_num_seqs"] < 1, "must be >= 1 when given"),
        (
            "max_num_batched_tokens",
            c["max_num_batched_tokens"] < 1,
            "must be >= 1 when given",
        ),
        ("target_requests_per_s", c["target_rps"] <= 0, "must be > 0 when given"),
        (
            "kv_cache_memory_bytes",
            c["kv_memory_given"] <= 0,
            "must be > 0 bytes when given",
        ),
        (
            "num_gpu_blocks_override",
            ~np.isnan(c["blocks_given"])
            & ((c["blocks_given"] < 1) | (c["blocks_given"] % 1 != 0)),
            "must be a whole number of blocks >= 1 when given",
        ),
        (
            "prefix_cache_hit_rate",
            ~((c["prefix_hit"] >= 0) & (c["prefix_hit"] < 1)),
            "must be in [0, 1)",
        ),
        ("gpu_hour_price", c["price"] < 0, "must be >= 0 when given"),
    ]
    for name, bad, reason in checks:
        if np.any(bad):
            raise InvalidInput(name, _first_bad(frame, name, bad), reason)
