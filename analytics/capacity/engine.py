"""Scenario in, capacity and cost out: one scenario or ten thousand at once.

``evaluate`` and ``evaluate_grid`` share one implementation (``_core``) that works
on numpy arrays, so the single path is the grid path with one row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity import memory as mem
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
    Calibration,
)
from analytics.capacity.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from analytics.capacity.errors import Infeasible, InvalidInput

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

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        scenario = asdict(self.scenario)
        if isinstance(self.scenario.model, ModelSpec):
            scenario["model"] = self.scenario.model.name
        out["scenario"] = scenario
        out["calibration"] = asdict(self.calibration)
        out["warnings"] = list(self.warnings)
        return out


# ---------------------------------------------------------------------------
# Resolution: names and defaults -> numbers (one row per scenario)
# ---------------------------------------------------------------------------

_STATIC_KEYS = (
    "model", "gpu", "mig_profile", "tp", "weight_dtype", "kv_dtype",
    "engine_version", "engine",
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
    tp = combo["tp"]
    if not isinstance(tp, int | np.integer) or tp < 1:
        raise InvalidInput("tp", tp, "must be a positive integer")
    mig_name = combo.get("mig_profile") or None
    version = mem.parse_engine_version(combo["engine_version"], combo.get("engine"))
    weight_dtype = str(combo["weight_dtype"]).lower()
    if weight_dtype not in mem.WEIGHT_DTYPES:
        raise InvalidInput(
            "weight_dtype", combo["weight_dtype"], f"known: {sorted(mem.WEIGHT_DTYPES)}"
        )
    kv_dtype = str(combo["kv_dtype"]).lower()
    kv_bytes = mem.kv_dtype_bytes(kv_dtype, version)
    if kv_dtype == "auto" and weight_dtype == "fp32":  # pragma: no cover - no fp32
        kv_bytes = 4.0
    warnings: list[str] = []

    if mig_name:
        if int(tp) > 1:
            raise InvalidInput(
                "tp",
                int(tp),
                "tensor parallelism across MIG instances is not possible: "
                "instances share no NVLink/P2P path, so one replica must fit one "
                "instance",
            )
        profile = gpu.mig_profile(str(mig_name))
        total_memory = float(profile.usable_memory_bytes)
        share = profile.compute_slices / 7.0
        if not profile.verified:
            warnings.append(
                f"usable memory of {gpu.name} {profile.name} is not verified on a device"
            )
        slices = profile.compute_slices
    else:
        total_memory = float(gpu.memory_bytes)
        share = 1.0
        slices = 7
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
    if mig_name and (cal is None or cal.kind != ENGINE_MEASUREMENTS):
        warnings.append(
            f"MIG {mig_name} speed is scaled as {slices}/7 of the GPU: uncalibrated, "
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
    return {
        "model_spec": model,
        "gpu_spec": gpu,
        "mig_name": mig_name,
        "generation_v1": version.generation == "v1",
        "old_v0": version.tuple < (0, 7, 0) and version.generation == "v0",
        "graphs_counted": version.generation == "v1" and version.tuple >= (0, 11, 0),
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
    return frame.reset_index(drop=True)


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
        values["tp"] = int(values["tp"]) if values["tp"] is not None else 1
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
    cols["tp"] = frame["tp"].to_numpy(dtype=np.float64)

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
    cols["enforce_eager"] = np.array(
        [
            bool(v) if v is not None and v == v else False
            for v in frame["enforce_eager"]
        ],
        dtype=bool,
    )
    chunked = frame["enable_chunked_prefill"]
    cols["chunked_given"] = chunked.notna().to_numpy()
    cols["chunked_value"] = np.array(
        [bool(v) if v is not None and v == v else False for v in chunked], dtype=bool
    )
    cols["offline"] = (frame["usage_context"].astype(str) == "offline").to_numpy()
    _validate_numbers(frame, cols)
    return cols, resolved, index


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
        ("gpu_hour_price", c["price"] < 0, "must be >= 0 when given"),
    ]
    for name, bad, reason in checks:
        if np.any(bad):
            raise InvalidInput(name, _first_bad(frame, name, bad), reason)


# ---------------------------------------------------------------------------
# The arithmetic, on arrays
# ---------------------------------------------------------------------------


def _core(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    tp = c["tp"]
    v1 = c["generation_v1"].astype(bool)
    old_v0 = c["old_v0"].astype(bool)
    max_model_len = np.where(
        np.isnan(c["max_model_len"]), c["max_position"], c["max_model_len"]
    )
    max_model_len = np.where(max_model_len <= 0, 4096, max_model_len)
    # V0 switched chunked prefill on by itself above 32k context.
    chunked = np.where(
        c["chunked_given"].astype(bool), c["chunked_value"], max_model_len > 32768
    )
    chunked = np.where(v1, True, chunked)
    big = c["big_board"].astype(bool)
    max_num_seqs = np.where(
        np.isnan(c["max_num_seqs"]), np.where(v1 & big, 1024, 256), c["max_num_seqs"]
    )
    default_mbt = mem.default_batched_tokens(
        v1, big, c["offline"], chunked, max_model_len, old_v0
    )
    mbt = np.where(
        np.isnan(c["max_num_batched_tokens"]), default_mbt, c["max_num_batched_tokens"]
    )

    kv_tok = mem.kv_bytes_per_token(
        c["layers"],
        c["kv_heads"],
        c["head_dim"],
        tp,
        c["kv_dtype_bytes"],
        c["kv_lora_rank"],
        c["rope_dim"],
    )
    weights = mem.weights_bytes(
        c["params_total"],
        c["embed_params"],
        c["vision_params"],
        c["body_bytes"],
        c["embed_bytes"],
        tp,
    )
    sampled = np.minimum(max_num_seqs, mbt)
    activation = mem.peak_activation_bytes(
        c["hidden"], c["ffn_width"], c["vocab"], tp, mbt, sampled, c["dequant_scratch"]
    )
    non_torch = mem.non_torch_bytes(old_v0, tp)
    graphs = mem.cuda_graph_bytes(
        c["layers"], c["graphs_counted"].astype(bool) & ~c["enforce_eager"]
    )
    budget = c["total_memory"] * c["gpu_memory_utilization"]
    kv_memory = budget - weights - activation - non_torch - graphs
    block = c["block_size"]
    blocks = mem.blocks_from_memory(kv_memory, block, kv_tok)
    kv_tokens = blocks * block

    # Sliding-window layers (V1 hybrid allocator) only keep the window per request,
    # so a request of L tokens costs fewer "full-layer" tokens of the pool.
    layers = c["layers"]
    swa_share = np.where(layers > 0, c["window_layers"] / layers, 0.0)

    def pool_tokens_for(length: np.ndarray) -> np.ndarray:
        window_len = np.minimum(length, c["window"] + block)
        return length * (1 - swa_share) + window_len * swa_share

    prompt = c["prompt_tokens"]
    output = c["output_tokens"]
    request_tokens = pool_tokens_for(prompt + output)
    conc_shape = mem.concurrency_for_shape(blocks, block, request_tokens, max_num_seqs)
    conc_at_len = kv_tokens / np.maximum(pool_tokens_for(max_model_len), 1.0)

    # ---- latency ---------------------------------------------------------
    eager = c["enforce_eager"]
    roof_t0 = (
        lat.STEP_OVERHEAD_S
        + layers * lat.STEP_OVERHEAD_PER_LAYER_S
        + np.where(eager, layers * lat.EAGER_OVERHEAD_PER_LAYER_S, 0.0)
        + np.where(tp > 1, 2 * layers * lat.ALLREDUCE_S, 0.0)
    )
    t0 = np.where(np.isnan(c["cal_t0"]), roof_t0, c["cal_t0"])
    bw_eff = np.where(np.isnan(c["cal_bw"]), c["bw"] * lat.BW_EFFICIENCY, c["cal_bw"])
    peak = c["peak_flops"]
    f_dec = np.where(
        np.isnan(c["cal_fdec"]), peak * lat.DECODE_FLOPS_EFFICIENCY, c["cal_fdec"]
    )
    f_pre = np.where(
        np.isnan(c["cal_fpre"]), peak * lat.PREFILL_FLOPS_EFFICIENCY, c["cal_fpre"]
    )
    p0 = np.where(np.isnan(c["cal_p0"]), lat.PREFILL_OVERHEAD_S, c["cal_p0"])
    pct_factor = c["cal_pct"]

    expert_bytes = c["expert_params"] * c["body_bytes"] / tp
    dense_bytes = weights - expert_bytes
    active_per_gpu = c["params_active"] / tp
    attn_coef = 2.0 * layers * c["heads"] * c["head_dim"] / tp
    context = prompt + output / 2.0

    def t_dec(batch: np.ndarray) -> np.ndarray:
        return lat.decode_step_s(
            batch,
            context,
            dense_weight_bytes=dense_bytes,
            expert_weight_bytes=expert_bytes,
            experts=c["experts"],
            top_k=c["top_k"],
            kv_bytes_per_token=kv_tok,
            active_params_per_gpu=active_per_gpu,
            t0_s=t0,
            bw_eff=bw_eff,
            decode_flops=f_dec,
        )

    prefill_full = lat.prefill_s(
        prompt,
        active_params_per_gpu=active_per_gpu,
        attn_flops_per_token2=attn_coef,
        prefill_flops=f_pre,
        p0_s=p0,
    )
    prefill_work = prefill_full - p0
    chunk = np.maximum(np.minimum(prompt, mbt), 1.0)
    chunk_time = chunk * (prefill_work / prompt)
    chunks_per_request = np.ceil(prompt / chunk)
    q = c["sla_percentile"]

    def itl(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        base = t_dec(batch)
        # Each step carries, on average, B/O requests' worth of prefill work.
        mean = base + batch * prefill_work / output
        share_with_prefill = np.minimum(1.0, batch / output * chunks_per_request)
        spike = np.where(share_with_prefill > (1.0 - q), chunk_time, 0.0)
        at_q = np.maximum(base + spike, mean) * pct_factor
        return base, mean, at_q

    sla_s = c["itl_sla_ms"] / 1000.0
    cap = np.floor(np.maximum(conc_shape, 0.0))
    lo = np.zeros_like(cap)
    hi = cap.copy()
    while np.any(lo < hi):
        mid = np.floor((lo + hi + 1) / 2)
        ok = itl(mid)[2] <= sla_s
        lo = np.where(ok & (lo < hi), mid, lo)
        hi = np.where(~ok & (lo < hi), mid - 1, hi)
    batch = lo
    safe_b = np.maximum(batch, 1.0)
    step, itl_mean, itl_q = itl(safe_b)
    throughput = np.where(batch > 0, batch / itl_mean, 0.0)
    rps = throughput / output
    ttft = prefill_full + step

    reason = np.full(batch.shape, "", dtype=object)
    no_memory = kv_memory <= 0
    no_blocks = ~no_memory & (cap < 1)
    too_long = ~no_memory & (blocks * block < np.minimum(max_model_len, 1e18))
    ttft_bad = ~np.isnan(c["ttft_sla_ms"]) & (ttft * 1000.0 > c["ttft_sla_ms"])
    sla_bad = (cap >= 1) & (batch < 1)
    reason = np.where(sla_bad, "itl_sla", reason)
    reason = np.where(ttft_bad & (reason == ""), "ttft_sla", reason)
    reason = np.where(no_blocks, "kv_cache_too_small_for_request", reason)
    reason = np.where(no_memory, "weights_and_activations_exceed_memory", reason)
    feasible = reason == ""

    share = c["gpu_share"]
    gpus_per_replica = tp * share
    target = c["target_rps"]
    with np.errstate(divide="ignore", invalid="ignore"):
        replicas = np.where(
            np.isnan(target), 1.0, np.ceil(target / np.where(rps > 0, rps, np.nan))
        )
    replicas = np.where(feasible, replicas, np.nan)
    served_rps = np.where(np.isnan(target), rps * replicas, target)
    price = c["price"]
    cost_hour = price * gpus_per_replica * replicas
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_1k = cost_hour / (served_rps * 3600.0) * 1000.0
        cost_1m = cost_hour / (served_rps * (prompt + output) * 3600.0) * 1e6
        cost_1m_out = cost_hour / (served_rps * output * 3600.0) * 1e6
    gpu_mem_gb = (weights + np.maximum(kv_memory, 0) + activation) / 1e9
    return {
        "kv_bytes_per_token": kv_tok,
        "weights_bytes": weights,
        "activation_bytes": activation,
        "non_torch_bytes": non_torch,
        "cuda_graph_bytes": graphs,
        "kv_cache_memory_bytes": kv_memory,
        "num_gpu_blocks": blocks,
        "kv_cache_tokens": kv_tokens,
        "max_concurrency": np.maximum(conc_shape, 0.0),
        "max_concurrency_at_max_model_len": np.maximum(conc_at_len, 0.0),
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": mbt,
        "max_model_len": max_model_len,
        "batch_size": batch,
        "decode_step_ms": step * 1000.0,
        "itl_mean_ms": itl_mean * 1000.0,
        "itl_at_percentile_ms": itl_q * 1000.0,
        "prefill_ms": prefill_full * 1000.0,
        "ttft_ms": ttft * 1000.0,
        "throughput_tokens_per_s": throughput,
        "max_requests_per_s_within_sla": rps,
        "replicas": replicas,
        "gpus_needed": gpus_per_replica * replicas,
        "gpu_share_per_replica": gpus_per_replica,
        "cost_per_hour": cost_hour,
        "cost_per_1k_requests": cost_1k,
        "cost_per_1m_tokens": cost_1m,
        "cost_per_1m_output_tokens": cost_1m_out,
        "gpu_memory_gb": gpu_mem_gb,
        "feasible": feasible,
        "reason": reason,
        "context_too_long": too_long,
        # Step-model constants, for the simulation.
        "t0_s": t0,
        "bw_eff": bw_eff,
        "f_dec": f_dec,
        "f_pre": f_pre,
        "p0_s": p0,
        "dense_bytes": dense_bytes,
        "expert_bytes": expert_bytes,
        "active_per_gpu": active_per_gpu,
        "attn_coef": attn_coef,
        "experts": c["experts"],
        "top_k": c["top_k"],
        "block_size": block,
    }


_REASONS = {
    "itl_sla": "no batch size meets the ITL SLA (even batch 1 is too slow)",
    "ttft_sla": "the prompt's prefill alone exceeds the TTFT SLA",
    "kv_cache_too_small_for_request": "the KV cache cannot hold one request of this "
    "shape (prompt + output tokens)",
    "weights_and_activations_exceed_memory": "weights and activations exceed "
    "total_gpu_memory x gpu_memory_utilization: no memory left for KV cache",
}


def _opt(value: float) -> float | None:
    return (
        None
        if value is None or (isinstance(value, float) and math.isnan(value))
        else float(value)
    )


def evaluate(scenario: Scenario, *, calibrations: Sequence[Calibration] = ()) -> Result:
    """Capacity, latency and cost of one scenario."""
    models_by_name = (
        {scenario.model.name: scenario.model}
        if isinstance(scenario.model, ModelSpec)
        else {}
    )
    frame = _frame_from([scenario])
    cols, resolved, _ = _columns(frame, calibrations, models_by_name)
    out = _core(cols)
    static = resolved[0]
    row = {k: v[0] for k, v in out.items()}
    warnings = list(static["warnings"])
    if row["context_too_long"]:
        warnings.append(
            f"max_model_len {int(row['max_model_len'])} exceeds the KV cache "
            f"({int(row['kv_cache_tokens'])} tokens): vLLM refuses to start"
        )
    if scenario.gpu_hour_price is None:
        warnings.append("no gpu_hour_price given: costs are not computed")
    code = str(row["reason"])
    return Result(
        scenario=scenario,
        feasible=bool(row["feasible"]),
        reason=_REASONS.get(code) if code else None,
        kv_bytes_per_token=float(row["kv_bytes_per_token"]),
        weights_bytes=float(row["weights_bytes"]),
        activation_bytes=float(row["activation_bytes"]),
        non_torch_bytes=float(row["non_torch_bytes"]),
        cuda_graph_bytes=float(row["cuda_graph_bytes"]),
        kv_cache_memory_bytes=float(row["kv_cache_memory_bytes"]),
        num_gpu_blocks=int(row["num_gpu_blocks"]),
        kv_cache_tokens=int(row["kv_cache_tokens"]),
        max_concurrency=float(row["max_concurrency"]),
        max_concurrency_at_max_model_len=float(row["max_concurrency_at_max_model_len"]),
        max_num_seqs=int(row["max_num_seqs"]),
        max_num_batched_tokens=int(row["max_num_batched_tokens"]),
        batch_size=int(row["batch_size"]),
        decode_step_ms=float(row["decode_step_ms"]),
        itl_mean_ms=float(row["itl_mean_ms"]),
        itl_at_percentile_ms=float(row["itl_at_percentile_ms"]),
        prefill_ms=float(row["prefill_ms"]),
        ttft_ms=float(row["ttft_ms"]),
        throughput_tokens_per_s=float(row["throughput_tokens_per_s"]),
        max_requests_per_s_within_sla=float(row["max_requests_per_s_within_sla"]),
        replicas=int(row["replicas"]) if not math.isnan(row["replicas"]) else 0,
        gpus_needed=float(np.nan_to_num(row["gpus_needed"])),
        gpu_share_per_replica=float(row["gpu_share_per_replica"]),
        cost_per_hour=_opt(row["cost_per_hour"]),
        cost_per_1k_requests=_opt(row["cost_per_1k_requests"]),
        cost_per_1m_tokens=_opt(row["cost_per_1m_tokens"]),
        cost_per_1m_output_tokens=_opt(row["cost_per_1m_output_tokens"]),
        gpu_memory_gb=float(row["gpu_memory_gb"]),
        calibration=CalibrationUsed(
            label=static["cal_label"], kind=static["cal_kind"], fit=static["cal_fit"]
        ),
        warnings=tuple(warnings),
    )


GRID_COLUMNS = (
    "feasible", "reason", "kv_bytes_per_token", "weights_bytes", "activation_bytes",
    "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency",
    "max_concurrency_at_max_model_len", "batch_size", "decode_step_ms", "itl_mean_ms",
    "itl_at_percentile_ms", "prefill_ms", "ttft_ms", "throughput_tokens_per_s",
    "max_requests_per_s_within_sla", "replicas", "gpus_needed", "cost_per_hour",
    "cost_per_1k_requests", "cost_per_1m_tokens", "cost_per_1m_output_tokens",
    "gpu_memory_gb", "max_num_seqs", "max_num_batched_tokens",
)  # fmt: skip


def evaluate_grid(
    scenarios: pd.DataFrame | Mapping[str, Sequence[Any]] | Iterable[Scenario],
    *,
    calibrations: Sequence[Calibration] = (),
) -> pd.DataFrame:
    """Many scenarios in one vectorised pass; returns inputs plus result columns.

    Columns not given take Scenario's defaults. ``calibration`` names what each row
    used. Rows that cannot run are kept with ``feasible`` False and a ``reason``.
    """
    frame = _frame_from(scenarios)
    models_by_name: dict[str, ModelSpec] = {}
    if not isinstance(scenarios, pd.DataFrame | Mapping):
        scenarios = list(scenarios)  # type: ignore[assignment]
        for s in scenarios:  # type: ignore[union-attr]
            if isinstance(s, Scenario) and isinstance(s.model, ModelSpec):
                models_by_name[s.model.name] = s.model
    cols, resolved, index = _columns(frame, calibrations, models_by_name)
    out = _core(cols)
    result = frame.copy()
    for name in GRID_COLUMNS:
        result[name] = out[name]
    labels = np.array([r["cal_label"] for r in resolved], dtype=object)
    result["calibration"] = labels[index]
    result["reason"] = [_REASONS.get(r) if r else None for r in out["reason"]]
    return result


# ---------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------

_DELTA_FIELDS = (
    "kv_cache_tokens", "max_concurrency", "batch_size", "decode_step_ms",
    "itl_at_percentile_ms", "ttft_ms", "throughput_tokens_per_s",
    "max_requests_per_s_within_sla", "gpus_needed", "cost_per_hour",
    "cost_per_1k_requests", "cost_per_1m_tokens", "gpu_memory_gb",
)  # fmt: skip


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


def compare(
    base: Scenario,
    variants: Sequence[Scenario | Mapping[str, Any]],
    *,
    calibrations: Sequence[Calibration] = (),
) -> Comparison:
    """The base scenario against variants (full scenarios or field overrides)."""
    base_result = evaluate(base, calibrations=calibrations)
    results: list[Result] = []
    all_deltas: list[tuple[Delta, ...]] = []
    for variant in variants:
        scenario = (
            variant if isinstance(variant, Scenario) else replace(base, **variant)
        )
        res = evaluate(scenario, calibrations=calibrations)
        results.append(res)
        deltas = []
        for name in _DELTA_FIELDS:
            a = getattr(base_result, name)
            b = getattr(res, name)
            if a is None or b is None:
                deltas.append(Delta(name, a, b, None, None))
                continue
            rel = (b - a) / a if a not in (0, 0.0) else None
            deltas.append(Delta(name, float(a), float(b), float(b - a), rel))
        all_deltas.append(tuple(deltas))
    return Comparison(base_result, tuple(results), tuple(all_deltas))


def require_feasible(result: Result) -> Result:
    if not result.feasible:
        raise Infeasible(result.reason or "infeasible")
    return result


@dataclass(frozen=True)
class StepModel:
    """The closed form's step-time constants for one scenario (used by simulate)."""

    t0_s: float
    bw_eff: float
    decode_flops: float
    prefill_flops: float
    p0_s: float
    dense_bytes: float
    expert_bytes: float
    experts: float
    top_k: float
    kv_bytes_per_token: float
    active_params_per_gpu: float
    attn_coef: float
    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int

    def decode_step_s(self, batch: float, context: float) -> float:
        return float(
            lat.decode_step_s(
                np.asarray(float(batch)),
                np.asarray(float(context)),
                dense_weight_bytes=np.asarray(self.dense_bytes),
                expert_weight_bytes=np.asarray(self.expert_bytes),
                experts=np.asarray(self.experts),
                top_k=np.asarray(self.top_k),
                kv_bytes_per_token=np.asarray(self.kv_bytes_per_token),
                active_params_per_gpu=np.asarray(self.active_params_per_gpu),
                t0_s=np.asarray(self.t0_s),
                bw_eff=np.asarray(self.bw_eff),
                decode_flops=np.asarray(self.decode_flops),
            )
        )

    def prefill_s(self, tokens: float) -> float:
        return self.p0_s + self.prefill_work_s(tokens, 0.0)

    def prefill_work_s(self, tokens: float, already: float) -> float:
        """Compute time of a chunk of ``tokens`` after ``already`` prompt tokens."""
        linear = tokens * 2.0 * self.active_params_per_gpu / self.prefill_flops
        end = already + tokens
        attention = (
            (end * end - already * already) * self.attn_coef / self.prefill_flops
        )
        return linear + attention


def step_model(
    scenario: Scenario, *, calibrations: Sequence[Calibration] = ()
) -> StepModel:
    models_by_name = (
        {scenario.model.name: scenario.model}
        if isinstance(scenario.model, ModelSpec)
        else {}
    )
    cols, _, _ = _columns(_frame_from([scenario]), calibrations, models_by_name)
    out = {k: v[0] for k, v in _core(cols).items()}
    return StepModel(
        t0_s=float(out["t0_s"]),
        bw_eff=float(out["bw_eff"]),
        decode_flops=float(out["f_dec"]),
        prefill_flops=float(out["f_pre"]),
        p0_s=float(out["p0_s"]),
        dense_bytes=float(out["dense_bytes"]),
        expert_bytes=float(out["expert_bytes"]),
        experts=float(out["experts"]),
        top_k=float(out["top_k"]),
        kv_bytes_per_token=float(out["kv_bytes_per_token"]),
        active_params_per_gpu=float(out["active_per_gpu"]),
        attn_coef=float(out["attn_coef"]),
        num_gpu_blocks=int(out["num_gpu_blocks"]),
        block_size=int(out["block_size"]),
        max_num_seqs=int(out["max_num_seqs"]),
        max_num_batched_tokens=int(out["max_num_batched_tokens"]),
    )
