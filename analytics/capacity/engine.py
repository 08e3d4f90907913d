"""Scenario in, capacity and cost out: one scenario or ten thousand at once.

``evaluate`` and ``evaluate_grid`` share one implementation (``_core``) that works
on numpy arrays, so the single path is the grid path with one row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity import memory as mem
from analytics.capacity.calibration_types import (
    Calibration,
)
from analytics.capacity.catalog import ModelSpec
from analytics.capacity.errors import Infeasible
from analytics.capacity.resolve import _columns, _frame_from
from analytics.capacity.scenario import (
    ROOFLINE,
    CalibrationUsed,
    Comparison,
    Delta,
    Result,
    Scenario,
)

__all__ = [
    "ROOFLINE",
    "CalibrationUsed",
    "Comparison",
    "Delta",
    "Result",
    "Scenario",
    "StepModel",
    "compare",
    "evaluate",
    "evaluate_grid",
    "require_feasible",
    "step_model",
]  # fmt: skip


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
