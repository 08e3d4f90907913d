"""Calibration fits and importers: the three ways measurements come in.

1. ``import_vllm_bench_serve`` / ``import_vllm_bench_latency``: result JSON of
   ``vllm bench serve --save-result`` and ``vllm bench latency --output-json``
   (the real engine, the main path);
2. ``fit_from_telemetry``: hourly inter-token latency against mean running batch;
3. ``hardware_constants_from_harness``: the file ``analytics.capacity.harness``
   writes (HBM bandwidth, GEMM FLOP/s, attention grid), labelled as hardware
   constants, not engine measurements.

Every fit reports its error on its own points (MAPE, R²).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from analytics.capacity import latency as lat
from analytics.capacity import memory as mem
from analytics.capacity.calibration_io import (
    MAX_SECONDS,
    SUPPORTED_SCHEMA_VERSIONS,
    CalibrationRefused,
    _number_row,
    _positive,
    bench_latencies,
    bench_serve_figures,
)
from analytics.capacity.calibration_prefill import (
    default_batched_tokens,
    is_burst,
    prefill_constants,
)
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
    Calibration,
    CalibrationKey,
    FitQuality,
)
from analytics.capacity.catalog import ModelSpec, get_gpu, get_model
from analytics.capacity.latency import LatencyParams
from analytics.errors import InvalidInput

# ---------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------


def fit_errors(actual: np.ndarray, predicted: np.ndarray) -> tuple[float, float | None]:
    actual = np.asarray(actual, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    mape = float(np.mean(np.abs(predicted - actual) / actual))
    ss_tot = float(np.sum((actual - actual.mean()) ** 2))
    r2 = (
        None
        if len(actual) < 3 or ss_tot == 0
        else 1 - float(np.sum((actual - predicted) ** 2)) / ss_tot
    )
    return mape, r2


def _setting(key: CalibrationKey, model: ModelSpec | None) -> dict[str, float]:
    """Weights, KV bytes and active params per GPU for the calibrated setting."""
    model = model or get_model(str(key.model))
    gpu = get_gpu(key.gpu)
    tp = key.tp or 1
    version = mem.parse_engine_version(key.engine_version or "0.10.1")
    kv_bytes = mem.kv_dtype_bytes(key.kv_dtype or "auto", version)
    body, embed = mem.WEIGHT_DTYPES[mem.weight_dtype_key(key.weight_dtype or "bf16")]
    embed_params = model.vocab * model.hidden * (1 if model.tie_embeddings else 2)
    weights = float(
        mem.weights_bytes(
            model.params_total, embed_params, model.vision_params, body, embed, tp
        )
    )
    share = 1.0
    if key.mig_profile:
        share = gpu.mig_profile(key.mig_profile).compute_slices / 7
    return {
        "weights": weights,
        "expert": model.expert_params_total * body / tp,
        "experts": float(model.num_experts),
        "top_k": float(model.experts_per_token),
        "kv": float(
            mem.kv_bytes_per_token(
                model.layers,
                model.kv_heads,
                model.head_dim,
                tp,
                kv_bytes,
                model.kv_lora_rank,
                model.qk_rope_head_dim,
            )
        ),
        "active": model.params_active / tp,
        "attn": 2.0 * model.layers * model.heads * model.head_dim / tp,
        "peak": gpu.peak_bf16_flops * share,
        "bw": gpu.hbm_bandwidth_bytes_per_s * share,
        "t0": lat.STEP_OVERHEAD_S
        + model.layers * lat.STEP_OVERHEAD_PER_LAYER_S
        + (2 * model.layers * lat.ALLREDUCE_S if tp > 1 else 0.0),
    }


def fit_decode(
    points: pd.DataFrame, setting: Mapping[str, float]
) -> tuple[float, float, float, str]:
    """Fit t0, BW_eff and decode FLOP/s to (batch, context, step_s) points."""
    b = points["batch"].to_numpy(float)
    c = points["context"].to_numpy(float)
    y = points["step_s"].to_numpy(float)
    weights = (
        setting["weights"]
        - setting["expert"]
        + setting["expert"]
        * (
            lat.expert_fraction(
                b,
                np.full_like(b, setting["experts"]),
                np.full_like(b, setting["top_k"]),
            )
        )
    )
    memory_bytes = weights + b * c * setting["kv"]
    compute = 2.0 * b * setting["active"]
    roof_f = setting["peak"] * lat.DECODE_FLOPS_EFFICIENCY
    roof_bw = setting["bw"] * lat.BW_EFFICIENCY
    same_context = np.ptp(c) <= 0.05 * float(np.mean(c))
    if len(points) >= 2 and np.ptp(b) > 0 and same_context and not setting["experts"]:
        # One context length: weights, KV and compute are all affine in the
        # batch, so three constants are not identifiable (an NNLS over them
        # puts everything in t0 and zeroes the bandwidth). Fit the line; t0 is
        # the roofline's, the intercept's rest sets BW, the slope's rest compute.
        (intercept, slope), _ = nnls(np.column_stack([np.ones_like(b), b]), y)
        bw, flops, t0, note = _bench_line_to_constants(
            float(intercept), float(slope), setting, float(np.mean(c)), float(b.mean())
        )
        method = "line t0 + slope x batch (one context, t0 from the roofline)"
        return float(t0), float(bw), float(flops), method + note
    if len(points) >= 3 and np.ptp(b) > 0:
        coef, _ = nnls(np.column_stack([np.ones_like(b), memory_bytes, compute]), y)
        t0, inv_bw, inv_f = coef
        method = "nnls t0 + bytes/BW + flops/F"
    elif len(points) >= 2 and np.ptp(b) > 0:
        coef, _ = nnls(
            np.column_stack([np.ones_like(b), memory_bytes]), y - compute / roof_f
        )
        t0, inv_bw = coef
        inv_f = 1 / roof_f
        method = "nnls t0 + bytes/BW (compute term from roofline)"
    else:
        inv_bw = 1 / roof_bw
        inv_f = 1 / roof_f
        t0 = max(0.0, float(np.mean(y - memory_bytes * inv_bw - compute * inv_f)))
        method = "t0 only (bandwidth and compute from roofline)"
    bw = 1 / inv_bw if inv_bw > 0 else roof_bw
    flops = 1 / inv_f if inv_f > 0 else roof_f * 100  # compute term not visible
    return float(t0), float(bw), float(flops), method


def _bench_line_to_constants(
    intercept: float,
    slope: float,
    setting: Mapping[str, float],
    context: float,
    batch: float,
) -> tuple[float, float, float, str]:
    """BW_eff, decode FLOP/s, t0 that reproduce a bench sweep's line, and a note.

    The per-step overhead is the roofline's (launches, per layer); what the
    intercept leaves is the weights' read time (BW = weights / rest), and what
    the slope leaves after each sequence's KV read is its compute. Constants
    split this way are the GPU's and the engine's, so they carry over to
    another model. Where the intercept is not above the roofline overhead, the
    telemetry fit's split (roofline balance) is used.

    Where the slope is below the KV reads at that bandwidth, no split
    reproduces the line: the model reads weights and KV at one bandwidth, and
    a slope that small means the sweep's batch range is too narrow (or its
    steps too flat) to tell the weights from the KV. Then one bandwidth is
    fitted to all the bytes a step reads at the sweep's mean ``batch`` (the
    line there), and compute is not visible.
    """
    rest = intercept - setting["t0"]
    roof_f = setting["peak"] * lat.DECODE_FLOPS_EFFICIENCY
    if rest <= 0:
        return (*_line_to_constants(intercept, slope, setting, context), "")
    bw = setting["weights"] / rest
    compute = slope - context * setting["kv"] / bw
    if compute > 0:
        return bw, 2 * setting["active"] / compute, setting["t0"], ""
    read = setting["weights"] + batch * context * setting["kv"]
    bw = read / (intercept + slope * batch - setting["t0"])
    note = (
        f"; slope {slope * 1e3:.3f} ms per sequence is under the KV reads at the "
        "intercept's bandwidth (batch range too narrow to split weights from "
        f"KV): one bandwidth for all bytes at the mean batch {batch:.1f}, "
        "compute not visible"
    )
    return bw, roof_f * 100, setting["t0"], note


# A run whose mean TPOT is more than this many times its median ITL spends more
# of each request's decode time in stalled steps (prefills sharing the step)
# than in typical ones: its median ITL does not pair with the batch Little's law
# gives on TPOT, so it says nothing about the decode step and is left out of
# the fit (decode-dominated runs sit at 1.0-1.2).
PREFILL_BOUND_TPOT_RATIO = 2.0


def _bench_points(results: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = []
    for i, res in enumerate(results):
        fig = bench_serve_figures(res, f"results[{i}]")  # each bounded, named
        step_ms, tpot_ms = fig["step_ms"], fig["tpot_ms"]
        mean_in = fig["total_input_tokens"] / fig["completed"]
        mean_out = fig["total_output_tokens"] / fig["completed"]
        # Little's law: sequences decoding at once = token rate x time per token.
        batch = max(1.0, fig["output_throughput"] * tpot_ms / 1000.0)
        rows.append(
            {
                "batch": batch,
                "context": mean_in + mean_out / 2,
                "step_s": step_ms / 1000,
                "ttft_s": fig["median_ttft_ms"] / 1000,
                "prompt": mean_in,
                "p99_itl_ratio": fig.get("p99_itl_ms", step_ms) / step_ms,
                "p99_itl_s": fig.get("p99_itl_ms", step_ms) / 1000,
                "tpot_ratio": tpot_ms / step_ms,
                "max_concurrency": res.get("max_concurrency"),
                "request_rate": res.get("request_rate"),
                "burst": is_burst(res),
            }
        )
    if not rows:
        raise CalibrationRefused("results", [], "no bench results given")
    return pd.DataFrame(rows)


def import_vllm_bench_serve(
    results: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    *,
    key: CalibrationKey,
    model: ModelSpec | None = None,
    source: str = "vllm bench serve",
    max_num_batched_tokens: int | None = None,
) -> Calibration:
    """Engine calibration from one or more ``vllm bench serve`` result files.

    ``max_num_batched_tokens`` is the server's token budget per step (the
    result file does not record it); without it, the engine's default for the
    calibrated setting. It sizes the prefill chunk in a burst's stalled steps
    (``calibration_prefill.stall_prefill_rates``).
    """
    if isinstance(results, Mapping):
        results = [results]
    points = _bench_points(results)
    stalled = points["tpot_ratio"] > PREFILL_BOUND_TPOT_RATIO
    if stalled.all():
        raise CalibrationRefused(
            "results",
            [round(float(r), 2) for r in points["tpot_ratio"]],
            "every run is prefill-bound (mean TPOT over "
            f"{PREFILL_BOUND_TPOT_RATIO:g}x the median ITL): their median ITL "
            "does not pair with a decode batch; calibrate on runs where decode "
            "dominates (a lower request rate or concurrency)",
        )
    points = points[~stalled].reset_index(drop=True)
    setting = _setting(key, model)
    t0, bw, f_dec, method = fit_decode(points, setting)
    if stalled.any():
        method += (
            f"; {int(stalled.sum())} of {len(stalled)} runs left out as "
            f"prefill-bound (mean TPOT > {PREFILL_BOUND_TPOT_RATIO:g}x median ITL)"
        )
    predicted = _predict_step(points, setting, t0, bw, f_dec)
    mape, r2 = fit_errors(points["step_s"].to_numpy(), predicted)
    f_pre, p0, prefill_method = prefill_constants(
        points,
        setting,
        lambda: max_num_batched_tokens or default_batched_tokens(key, model),
    )
    method += "; " + prefill_method
    params = LatencyParams(
        t0_s=t0,
        bw_eff_bytes_per_s=bw,
        decode_flops_eff=f_dec,
        prefill_flops_eff=f_pre,
        p0_s=p0,
    )
    return Calibration(
        kind=ENGINE_MEASUREMENTS,
        key=key,
        params=params,
        fit=FitQuality(len(points), mape, r2, method),
        source=source,
        points=tuple(
            points[["batch", "context", "step_s", "ttft_s"]].to_dict("records")
        ),
    )


def _predict_step(
    points: pd.DataFrame,
    setting: Mapping[str, float],
    t0: float,
    bw: float,
    f_dec: float,
) -> np.ndarray:
    b = points["batch"].to_numpy(float)
    c = points["context"].to_numpy(float)
    n = len(b)
    return lat.decode_step_s(
        b,
        c,
        dense_weight_bytes=np.full(n, setting["weights"] - setting["expert"]),
        expert_weight_bytes=np.full(n, setting["expert"]),
        experts=np.full(n, setting["experts"]),
        top_k=np.full(n, setting["top_k"]),
        kv_bytes_per_token=np.full(n, setting["kv"]),
        active_params_per_gpu=np.full(n, setting["active"]),
        t0_s=np.full(n, t0),
        bw_eff=np.full(n, bw),
        decode_flops=np.full(n, f_dec),
    )


def import_vllm_bench_latency(
    result: Mapping[str, Any],
    *,
    key: CalibrationKey,
    batch_size: int,
    input_len: int,
    output_len: int,
    model: ModelSpec | None = None,
    source: str = "vllm bench latency",
) -> Calibration:
    """Engine calibration from ``vllm bench latency --output-json`` (one batch run).

    That file holds ``avg_latency``, ``latencies`` and ``percentiles`` but not the
    batch size or lengths, which were command-line flags: pass them here.
    """
    avg = _positive(result, "avg_latency", maximum=MAX_SECONDS)
    latencies = bench_latencies(result)
    if not isinstance(result.get("percentiles"), Mapping):
        raise InvalidInput(
            "percentiles", result.get("percentiles"), "must be an object"
        )
    setting = _setting(key, model)
    # Prefill of the whole batch from the roofline; the rest is output_len steps.
    f_pre = setting["peak"] * lat.PREFILL_FLOPS_EFFICIENCY
    prefill = (
        lat.PREFILL_OVERHEAD_S
        + batch_size
        * (input_len * 2 * setting["active"] + input_len**2 * setting["attn"])
        / f_pre
    )
    step = max(1e-6, (avg - prefill) / max(output_len, 1))
    points = pd.DataFrame(
        [
            {
                "batch": float(batch_size),
                "context": input_len + output_len / 2,
                "step_s": step,
            }
        ]
    )
    t0, bw, f_dec, method = fit_decode(points, setting)
    lat_arr = np.asarray(latencies, dtype=float)
    steps = np.maximum((lat_arr - prefill) / max(output_len, 1), 1e-6)
    predicted = _predict_step(points, setting, t0, bw, f_dec)
    mape, r2 = fit_errors(steps, np.full_like(steps, predicted[0]))
    params = LatencyParams(
        t0_s=t0,
        bw_eff_bytes_per_s=bw,
        decode_flops_eff=f_dec,
        prefill_flops_eff=f_pre,
        p0_s=lat.PREFILL_OVERHEAD_S,
    )
    return Calibration(
        kind=ENGINE_MEASUREMENTS,
        key=key,
        params=params,
        fit=FitQuality(len(lat_arr), mape, r2, method + "; one batch size"),
        source=source,
        points=tuple(points.to_dict("records")),
    )


def fit_from_telemetry(
    hourly: pd.DataFrame,
    *,
    key: CalibrationKey,
    context_tokens: float,
    model: ModelSpec | None = None,
    min_points: int = 6,
    min_batch_spread: float = 1.5,
    prompt_tokens: float | None = None,
    output_tokens: float | None = None,
    cached_prompt_tokens: float = 0.0,
) -> Calibration:
    """Fit ITL = a + b * batch to hourly telemetry; refuses data that is too flat.

    ``hourly`` has columns ``mean_running_batch`` and ``itl_seconds`` (one row per
    hour, e.g. from ``vllm:num_requests_running`` and the inter-token latency
    histogram). A fleet that ran at one load all day says nothing about the slope.

    Observed mean ITL includes the prefill chunks that share the steps. Given the
    request shape (``prompt_tokens``, ``output_tokens``), that share (batch x one
    prompt's prefill / output tokens, at the roofline prefill rate the engine also
    uses with this calibration) is taken out before fitting, so the engine does
    not count it twice. ``prompt_tokens`` is the uncached part; the new tokens'
    attention spans the ``cached_prompt_tokens`` too, as the engine has it.
    """
    for column in ("mean_running_batch", "itl_seconds"):
        if column not in hourly:
            raise InvalidInput(f"telemetry.{column}", None, "missing column")
    data = hourly[["mean_running_batch", "itl_seconds"]].dropna()
    data = data[(data["mean_running_batch"] > 0) & (data["itl_seconds"] > 0)]
    if len(data) < min_points:
        raise CalibrationRefused(
            "telemetry.rows",
            len(data),
            f"need at least {min_points} hours with traffic",
        )
    b = data["mean_running_batch"].to_numpy(float)
    y = data["itl_seconds"].to_numpy(float)
    setting = _setting(key, model)
    raw_slope = float(np.polyfit(b, y, 1)[0]) if np.ptp(b) > 0 else 0.0
    share = 0.0  # prefill seconds per running request per step
    if prompt_tokens and output_tokens:
        f_pre = setting["peak"] * lat.PREFILL_FLOPS_EFFICIENCY
        whole = prompt_tokens + cached_prompt_tokens
        prefill = (
            prompt_tokens * 2.0 * setting["active"]
            + (whole * whole - cached_prompt_tokens**2) * setting["attn"]
        ) / f_pre
        share = prefill / output_tokens
        y = y - b * share
    spread = float(b.max() / b.min())
    if spread < min_batch_spread:
        raise CalibrationRefused(
            "telemetry.mean_running_batch",
            f"{b.min():.2f}..{b.max():.2f}",
            f"too flat: running batch varies only {spread:.2f}x (need "
            f">= {min_batch_spread}x) so the slope of ITL against batch is not "
            "identifiable",
        )
    slope, intercept = np.polyfit(b, y, 1)
    if slope <= 0 and raw_slope > 0 and share > 0:
        # The data is not flat: what it lacks is the prefill share the engine
        # adds to every step, so no decode step fits it (a stall-free ITL).
        raise CalibrationRefused(
            "telemetry.itl_seconds",
            f"{raw_slope * 1e3:.3f} ms per running request",
            "mean ITL grows less with the running batch than the prefill sharing "
            f"the steps accounts for on its own ({share * 1e3:.3f} ms per running "
            f"request: a {prompt_tokens:.0f}-token uncached prefill over "
            f"{output_tokens:.0f} output tokens at the roofline prefill rate), so "
            "no decode step reproduces it; this ITL carries no prefill work, and "
            "a fit would only move the error into the decode step",
        )
    if slope <= 0:
        raise CalibrationRefused(
            "telemetry.itl_seconds",
            f"{float(slope) * 1e3:.3f} ms per running request",
            "ITL does not grow with batch in this data (slope <= 0): too noisy to fit",
        )
    predicted = intercept + slope * b
    mape, r2 = fit_errors(y, predicted)
    bw, f_dec, t0 = _line_to_constants(
        float(intercept), float(slope), setting, context_tokens
    )
    params = LatencyParams(
        t0_s=t0,
        bw_eff_bytes_per_s=float(bw),
        decode_flops_eff=f_dec,
        prefill_flops_eff=setting["peak"] * lat.PREFILL_FLOPS_EFFICIENCY,
        p0_s=lat.PREFILL_OVERHEAD_S,
    )
    return Calibration(
        kind=ENGINE_MEASUREMENTS,
        key=key,
        params=params,
        fit=FitQuality(len(data), mape, r2, "telemetry: ITL = a + b * running batch"),
        source="telemetry",
        points=tuple(
            {"batch": float(bi), "step_s": float(yi)}
            for bi, yi in zip(b, y, strict=True)
        ),
    )


def _line_to_constants(
    intercept: float,
    slope: float,
    setting: Mapping[str, float],
    context_tokens: float,
) -> tuple[float, float, float]:
    """BW_eff, decode FLOP/s and t0 that reproduce ``ITL = a + b * batch`` exactly.

    Two numbers cannot fix three constants, so the roofline's balance of memory
    and compute is kept and both are scaled by one factor k to give the slope
    (``b = k * (C*kv/BW + 2*P/F)``); t0 is what is left of the intercept. When
    that leaves t0 below zero, t0 is 0, the intercept sets BW (weights / a) and
    the slope's rest sets the compute rate.
    """
    roof_bw = setting["bw"] * lat.BW_EFFICIENCY
    roof_f = setting["peak"] * lat.DECODE_FLOPS_EFFICIENCY
    per_seq = context_tokens * setting["kv"] / roof_bw + 2 * setting["active"] / roof_f
    k = slope / per_seq
    t0 = intercept - k * setting["weights"] / roof_bw
    if t0 >= 0:
        return roof_bw / k, roof_f / k, t0
    bw = setting["weights"] / intercept if intercept > 0 else roof_bw
    compute = slope - context_tokens * setting["kv"] / bw
    f_dec = 2 * setting["active"] / compute if compute > 0 else roof_f * 100
    return bw, f_dec, 0.0


def hardware_constants_from_harness(data: Mapping[str, Any]) -> Calibration:
    """Calibration of kind hardware_constants from the harness output document."""
    if data.get("kind") != HARDWARE_CONSTANTS:
        raise InvalidInput("kind", data.get("kind"), f"must be '{HARDWARE_CONSTANTS}'")
    if data.get("schema_version") not in SUPPORTED_SCHEMA_VERSIONS:
        raise InvalidInput(
            "schema_version",
            data.get("schema_version"),
            f"supported: {sorted(SUPPORTED_SCHEMA_VERSIONS)}",
        )
    bw = _positive(data, "hbm_bandwidth_bytes_per_s")
    flops = _positive(data, "gemm_flops")
    attention = data.get("attention", [])
    if not isinstance(attention, list):
        raise InvalidInput("attention", attention, "must be a list")
    mape = r2 = None
    if len(attention) >= 3:
        names = ("batch", "context", "seconds")
        frame = pd.DataFrame(
            [
                _number_row(r, f"attention[{i}]", names=names)
                for i, r in enumerate(attention)
            ]
        )
        x = (frame["batch"] * frame["context"]).to_numpy(float)
        y = frame["seconds"].to_numpy(float)
        slope, intercept = np.polyfit(x, y, 1)
        mape, r2 = fit_errors(y, intercept + slope * x)
    gpu = data.get("gpu") or "cpu"
    key = CalibrationKey(gpu=str(gpu), mig_profile=data.get("mig_profile"))
    params = LatencyParams(
        t0_s=float("nan"),
        bw_eff_bytes_per_s=bw,
        decode_flops_eff=flops * 0.7,
        prefill_flops_eff=flops,
        p0_s=float("nan"),
    )
    return Calibration(
        kind=HARDWARE_CONSTANTS,
        key=key,
        params=params,
        fit=FitQuality(
            len(attention),
            mape,
            r2,
            "hardware constants: copy bandwidth, GEMM peak, attention ~ B*C",
        ),
        source=str(data.get("device", {}).get("name", "harness"))
        if isinstance(data.get("device"), Mapping)
        else "harness",
    )
