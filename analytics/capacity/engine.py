"""Scenario in, capacity and cost out: one scenario or ten thousand at once.

``evaluate`` and ``evaluate_grid`` share one implementation (``_core``) that works
on numpy arrays, so the single path is the grid path with one row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity import memory as mem
from analytics.capacity import reasons, refusals
from analytics.capacity.binding import binding
from analytics.capacity.calibration_types import (
    Calibration,
)
from analytics.capacity.catalog import ModelSpec
from analytics.capacity.errors import Infeasible, Refused
from analytics.capacity.latency import StepModel
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
        c["layers"], c["kv_heads"], c["head_dim"], tp, c["kv_dtype_bytes"],
        c["kv_lora_rank"], c["rope_dim"], c["mla_aligned"] > 0,
    )  # fmt: skip
    weights = mem.weights_bytes(
        c["params_total"],
        c["embed_params"],
        c["vision_params"],
        c["body_bytes"],
        c["embed_bytes"],
        tp,
        c["unquantized_params"],
    )
    # Expert parallelism: routed experts sit whole on EP ranks instead of being
    # TP-sharded, so this GPU holds expert_share of them (1/TP without EP).
    expert_total = c["expert_params"] * c["body_bytes"]
    weights = weights - expert_total / tp + expert_total * c["expert_share"]
    activation, non_torch = mem.activation_and_non_torch(c, mbt, max_num_seqs, old_v0)
    # vLLM deducts its own CUDA-graph estimate only when the profiler flag is on
    # and graphs are captured; otherwise graphs come out of the (1 - util) slack.
    graphs = mem.cuda_graph_bytes(
        c["layers"], c["graphs_estimated"] & v1 & ~c["enforce_eager"]
    )
    budget = c["total_memory"] * c["gpu_memory_utilization"]
    profiled = budget - weights - activation - non_torch - graphs
    # --kv-cache-memory skips profiling: the pool is what the user asked for.
    kv_given = ~np.isnan(c["kv_memory_given"])
    kv_memory = np.where(kv_given, c["kv_memory_given"], profiled)
    block = c["block_size"]
    blocks = mem.blocks_from_memory(kv_memory, block, kv_tok)
    # --num-gpu-blocks-override replaces the profiled count (vLLM v1
    # kv_cache_utils.get_num_blocks: "Overriding num_gpu_blocks=%d with
    # num_gpu_blocks_override=%d"); the pool's bytes follow the blocks.
    blocks_given = ~np.isnan(c["blocks_given"])
    blocks = np.where(blocks_given, np.nan_to_num(c["blocks_given"]), blocks).astype(
        np.int64
    )
    kv_memory = np.where(blocks_given, blocks * block * kv_tok, kv_memory)
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

    expert_bytes = expert_total * c["expert_share"]
    dense_bytes = weights - expert_bytes
    active_per_gpu = c["params_active"] / tp
    attn_coef = 2.0 * layers * c["heads"] * c["head_dim"] / tp
    context = prompt + output / 2.0

    def t_dec(batch: np.ndarray) -> np.ndarray:
        overhead, reads, flops = t_dec_parts(batch)
        return overhead + reads + flops

    def t_dec_parts(batch: np.ndarray) -> tuple[np.ndarray, ...]:
        return lat.decode_step_parts(
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
            expert_batch_factor=c["expert_batch_factor"],
        )

    # Prefix-cache hits skip the cached tokens' linear work; attention of the new
    # tokens still spans the whole context (cached part included).
    cached = prompt * c["prefix_hit"]
    computed = np.maximum(prompt - cached, 1.0)
    prefill_work = (
        computed * 2.0 * active_per_gpu
        + (prompt * prompt - cached * cached) * attn_coef
    ) / f_pre
    prefill_full = p0 + prefill_work
    chunk = np.maximum(np.minimum(computed, mbt), 1.0)
    chunk_time = chunk * (prefill_work / computed)
    chunks_per_request = np.ceil(computed / chunk)
    q = c["sla_percentile"]

    def itl(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        base = t_dec(batch)
        # Each step carries, on average, B/O requests' worth of prefill work.
        mean = base + batch * prefill_work / output
        at_q = lat.percentile_itl_s(
            base,
            mean,
            chunk_s=chunk_time,
            share_with_prefill=np.minimum(1.0, batch / output * chunks_per_request),
            percentile=q,
            factor=c["cal_pct"],
            stall=c["cal_stall"],
        )
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
    # One engine (KV pool, scheduler) per DP rank: a replica is DP ranks x TP GPUs.
    dp = c["dp"]
    throughput = np.where(batch > 0, batch / itl_mean, 0.0) * dp
    rps = throughput / output
    ttft = prefill_full + step

    # ---- what vLLM refuses, then what does not meet the SLA ----------------
    # One max_model_len sequence must fit the pool (V1: estimate_max_model_len).
    needed_tokens = np.ceil(pool_tokens_for(max_model_len) / block) * block
    needed_bytes = needed_tokens * kv_tok
    estimated_len = mem.largest_len_fitting(kv_tokens, c["window"] + block, swa_share)
    mbt_given = ~np.isnan(c["max_num_batched_tokens"])
    derived = c["max_position"]
    above_derived = (derived > 0) & (max_model_len > derived)
    reason = np.full(batch.shape, "", dtype=object)
    no_memory = (kv_memory <= 0) | (blocks < 1)
    too_long = ~no_memory & np.where(
        v1, needed_bytes > np.maximum(kv_memory, 0.0), kv_tokens < max_model_len
    )
    prompt_rejected = prompt >= max_model_len
    no_blocks = ~no_memory & (cap < 1)
    ttft_bad = ~np.isnan(c["ttft_sla_ms"]) & (ttft * 1000.0 > c["ttft_sla_ms"])
    sla_bad = (cap >= 1) & (batch < 1)
    not_modelled = c["speculative_decoding"] | c["lora"]
    # Lowest priority first: each later line overrides, so the first refusal vLLM
    # would make is the one reported.
    steps = [
        (sla_bad, "itl_sla"),
        (ttft_bad, "ttft_sla"),
        (no_blocks, "kv_cache_too_small_for_request"),
        (prompt_rejected, "prompt_longer_than_max_model_len"),
        (not_modelled, "not_modelled"),
        (too_long, "max_model_len_exceeds_pool"),
        (no_memory, "no_kv_memory"),
        (~v1 & ~chunked & mbt_given & (mbt < max_model_len),
         "batched_tokens_below_max_model_len"),
        (mbt_given & (mbt < max_num_seqs), "batched_tokens_below_seqs"),
        (above_derived & ~c["allow_long_max_model_len"], "max_model_len_above_derived"),
    ]  # fmt: skip
    for mask, code in steps:
        reason = np.where(mask, code, reason)
    static = c["static_refusal"]
    reason = np.where(static != "", static, reason)
    feasible = reason == ""
    overhead, reads, flops = t_dec_parts(safe_b)
    limit = binding(
        reason=reason, batch=batch, cap=cap, max_num_seqs=max_num_seqs,
        kv_seqs=mem.concurrency_for_shape(blocks, block, request_tokens, np.full_like(batch, np.inf)),
        overhead=overhead, memory=reads, compute=flops, prefill=itl_mean - step,
    )  # fmt: skip

    share = c["gpu_share"]
    gpus_per_replica = tp * dp * share
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
        "binding": limit,
        "above_derived": above_derived,
        "needed_bytes": needed_bytes,
        "estimated_max_len": estimated_len,
        "prompt": prompt,
        "v1": v1,
        "max_position": derived,
        "expert_batch_factor": c["expert_batch_factor"],
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
        "itl_percentile_factor": c["cal_pct"],
        "stall_fraction": c["cal_stall"],
    }


def _opt(value: float) -> float | None:
    return (
        None
        if value is None or (isinstance(value, float) and math.isnan(value))
        else float(value)
    )


def evaluate(scenario: Scenario, *, calibrations: Sequence[Calibration] = ()) -> Result:
    """Capacity, latency and cost of one scenario.

    Raises ``Refused`` (an ``InvalidInput``) for what vLLM refuses at config time
    (TP that does not divide the heads, max_model_len above the model's, ...);
    returns ``starts`` False for what it refuses after profiling (no KV memory,
    max_model_len larger than the pool). Both reasons quote vLLM.
    """
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
    code = str(row["reason"])
    text = reasons.reason_text(code, row, static)
    if code in reasons.CONFIG_TIME:
        field, value = reasons.refused_field(code, static, scenario)
        raise Refused(
            field,
            value,
            text or code,
            code=code,
            source=refusals.SOURCES[code],
        )
    warnings = list(static["warnings"]) + reasons.row_warnings(row, scenario)
    if scenario.gpu_hour_price is None:
        warnings.append("no gpu_hour_price given: costs are not computed")
    return Result(
        scenario=scenario,
        feasible=bool(row["feasible"]),
        reason=text,
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
        starts=code not in reasons.REFUSAL_CODES,
        refusal=code if code in reasons.REFUSAL_CODES else None,
        modelled=code != "not_modelled",
        max_model_len_admitted=_admitted(row),
        binding=str(row["binding"]),
    )


def _admitted(row: Mapping[str, Any]) -> int:
    """The longest request the pool admits; a model whose every layer slides
    admits any length, so its own maximum."""
    longest = float(row["estimated_max_len"])
    if not math.isfinite(longest):
        longest = float(row["max_position"])
    return max(0, int(longest)) if math.isfinite(longest) else 0


GRID_COLUMNS = (
    "feasible", "reason", "kv_bytes_per_token", "weights_bytes", "activation_bytes",
    "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency",
    "max_concurrency_at_max_model_len", "batch_size", "decode_step_ms", "itl_mean_ms",
    "itl_at_percentile_ms", "prefill_ms", "ttft_ms", "throughput_tokens_per_s",
    "max_requests_per_s_within_sla", "replicas", "gpus_needed", "cost_per_hour",
    "cost_per_1k_requests", "cost_per_1m_tokens", "cost_per_1m_output_tokens",
    "gpu_memory_gb", "max_num_seqs", "max_num_batched_tokens", "binding",
)  # fmt: skip


def evaluate_grid(
    scenarios: pd.DataFrame | Mapping[str, Sequence[Any]] | Iterable[Scenario],
    *,
    calibrations: Sequence[Calibration] = (),
) -> pd.DataFrame:
    """Many scenarios in one vectorised pass; returns inputs plus result columns.

    Columns not given take Scenario's defaults. ``calibration`` names what each row
    used. Rows that cannot run are kept with ``feasible`` False and a ``reason``;
    rows vLLM refuses (at config time or start-up) also have ``starts`` False and
    ``refusal`` naming the check, and the reason quotes vLLM.
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
    codes = out["reason"]
    texts: list[str | None] = []
    for i, code in enumerate(codes):
        if not code:
            texts.append(None)
            continue
        row = {k: v[i] for k, v in out.items()}
        texts.append(reasons.reason_text(str(code), row, resolved[index[i]]))
    result["reason"] = texts
    refused = np.isin(codes.astype(str), list(reasons.REFUSAL_CODES))
    result["starts"] = ~refused
    result["refusal"] = [
        str(code) if hit else None for code, hit in zip(codes, refused, strict=True)
    ]
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
        expert_batch_factor=float(out["expert_batch_factor"]),
        itl_percentile_factor=float(out["itl_percentile_factor"]),
        stall_fraction=float(out["stall_fraction"]),
        prefix_caching=bool(cols["generation_v1"][0]),
    )
