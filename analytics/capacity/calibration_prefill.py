"""Prefill rate and per-request overhead (p0) from ``vllm bench serve`` runs.

``calibration_fit.import_vllm_bench_serve`` fits the decode step; this reads
the prefill side, first found of: the stalled steps of bursts (a p99 ITL step
that carries the token budget's prefill chunk), the light-load TTFT (where it
implies no more than the GPU's peak), the roofline. docs/capacity.md,
"Prefill rate and p0 from bench runs".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity.calibration_types import CalibrationKey
from analytics.capacity.catalog import ModelSpec
from analytics.capacity.engine import step_model
from analytics.capacity.scenario import Scenario


def is_burst(res: Mapping[str, Any]) -> bool:
    """Every request sent at once: ``--request-rate inf`` (the result file
    writes ``"inf"``) with no ``--max-concurrency``."""
    rate = res.get("request_rate")
    unlimited = (isinstance(rate, str) and rate.strip().lower() == "inf") or (
        isinstance(rate, int | float) and rate == float("inf")
    )
    return unlimited and not res.get("max_concurrency")


# A run whose p99 ITL is more than this many times its median has a stall tail:
# its p99 step carries a prefill chunk beside the decodes (runs without one sit
# at 1.1-1.5x; tail_validation.STALL_RATIO is this line).
STALL_ITL_RATIO = 2.0
# How a fit's method says its prefill rate came from stalled steps.
PREFILL_FROM_STALLS = "from the p99 - median ITL of"


def default_batched_tokens(key: CalibrationKey, model: ModelSpec | None) -> int:
    """The engine's ``max_num_batched_tokens`` for the calibrated setting."""
    scenario = Scenario(
        model=model or str(key.model),
        gpu=key.gpu,
        mig_profile=key.mig_profile,
        tp=key.tp or 1,
        weight_dtype=key.weight_dtype or "bf16",
        kv_dtype=key.kv_dtype or "auto",
        engine_version=key.engine_version or "0.10.1",
    )
    return step_model(scenario).max_num_batched_tokens


def chunk_flops(
    tokens: np.ndarray, prompt: np.ndarray, setting: Mapping[str, float]
) -> np.ndarray:
    """FLOPs of a prefill chunk of ``tokens`` from prompts of ``prompt`` tokens.

    Linear layers as ``latency.prefill_s``; attention is that of the prompt
    (``prompt^2 x attn``) in proportion to the chunk's share of it: the mean
    over the prompt's chunks, whichever part the chunk is, since the chunks'
    attention terms (``(a + t)^2 - a^2``) add up to the prompt's.
    """
    return tokens * 2.0 * setting["active"] + tokens * prompt * setting["attn"]


def stall_prefill_rates(
    points: pd.DataFrame, setting: Mapping[str, float], batched_tokens: int
) -> tuple[np.ndarray, int]:
    """Prefill FLOP/s each stalled burst's p99 step shows, and how many
    stalled bursts showed more than the GPU's peak (left out).

    In a burst the waiting queue outlasts the decode phase, and vLLM V1
    schedules the running decodes first (one token each of the step's budget)
    and fills the rest with waiting prompts: a step that carries prefill
    carries ``max_num_batched_tokens - batch`` prompt tokens, whatever the
    prompts' lengths. Where that step is the p99 (p99 over
    ``STALL_ITL_RATIO`` x the median), p99 - median ITL is its prefill's
    compute time. Closed loops and rate runs admit a prompt or two as requests
    arrive, so their chunk depends on the prompt-length distribution the file
    does not give; they are not used. A stall under the chunk's FLOPs at peak
    is not a full chunk (prefix-cache hits, a p99 that falls in a partial one).
    """
    use = (
        points["burst"].astype(bool)
        & (points["p99_itl_ratio"] > STALL_ITL_RATIO)
        & (batched_tokens - points["batch"] > 0)
    )
    part = points[use]
    if part.empty:
        return np.empty(0), 0
    tokens = batched_tokens - part["batch"].to_numpy(float)
    stall = (part["p99_itl_s"] - part["step_s"]).to_numpy(float)
    rates = chunk_flops(tokens, part["prompt"].to_numpy(float), setting) / stall
    physical = rates <= setting["peak"]
    return rates[physical], int((~physical).sum())


def prefill_constants(
    points: pd.DataFrame,
    setting: Mapping[str, float],
    batched_tokens: Callable[[], int],
) -> tuple[float, float, str]:
    """Prefill FLOP/s, the per-request overhead p0, and where they came from.

    The rate, first found of: the stalled steps of bursts
    (``stall_prefill_rates``, their median); the light-load TTFT where it is
    below the roofline prefill and implies no more than the GPU's peak; the
    roofline. A rate above peak is not prefill compute: the TTFT was shortened
    (prefix-cache hits), so it sets neither the rate nor p0. p0 is what the
    light-load TTFT leaves after one step and the prompt's prefill at the rate
    in use, where that is positive; otherwise the roofline's.
    """
    peak = setting["peak"]
    f_pre = peak * lat.PREFILL_FLOPS_EFFICIENCY
    p0 = lat.PREFILL_OVERHEAD_S
    notes: list[str] = []
    from_stalls = False
    stalled = points["burst"].astype(bool) & (points["p99_itl_ratio"] > STALL_ITL_RATIO)
    if stalled.any():
        rates, above = stall_prefill_rates(points, setting, batched_tokens())
        if above:
            notes.append(
                f"{above} stalled burst(s) left out: p99 - median ITL under the "
                "chunk's FLOPs at peak (not a full chunk)"
            )
        if len(rates):
            f_pre, from_stalls = float(np.median(rates)), True
            notes.insert(
                0,
                f"prefill {f_pre / 1e12:.0f} TFLOP/s ({f_pre / peak:.0%} of peak) "
                f"{PREFILL_FROM_STALLS} {len(rates)} stalled burst(s)",
            )
    # TTFT at light load is p0, the prompt's prefill and one step. With one
    # prompt length the two cannot be told apart: what the prefill leaves is
    # p0; a TTFT below the roofline prefill (a faster GPU) sets the rate, p0 = 0.
    light = points[points["batch"] <= 4]
    if len(light):
        work = (light["ttft_s"] - light["step_s"]).to_numpy()
        n = light["prompt"].to_numpy()
        flops_needed = chunk_flops(n, n, setting)
        rest = float(np.median(work - flops_needed / f_pre))
        if rest > 0:
            p0 = rest
            notes.append(f"p0 {p0 * 1e3:.1f} ms from the light-load TTFT")
        elif from_stalls:
            notes.append(
                "light-load TTFT below the prompt's prefill at that rate "
                "(prefix-cache hits): p0 from the roofline"
            )
        elif np.all(work > 0):
            implied = float(np.median(flops_needed / work))
            if implied <= peak:
                f_pre, p0 = implied, 0.0
                notes.append(
                    f"prefill {f_pre / 1e12:.0f} TFLOP/s from the light-load "
                    "TTFT, p0 = 0"
                )
            else:
                notes.append(
                    f"light-load TTFT implies {implied / 1e12:.0f} TFLOP/s, over "
                    f"the GPU's peak {peak / 1e12:.0f}: not prefill compute "
                    "(prefix-cache hits), refused; prefill and p0 from the "
                    "roofline"
                )
    if not notes:
        notes.append("prefill and p0 from the roofline")
    return f_pre, p0, "; ".join(notes)
