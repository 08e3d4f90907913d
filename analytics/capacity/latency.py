"""Step-time model: roofline defaults, replaced by calibration where it exists.

Decode is memory-bound: one step at batch B and mean context C reads the weights
once and every sequence's KV, ``t = t0 + (W(B) + B*C*kv) / BW_eff + B*2*P/F_dec``.
For MoE, W(B) grows with B because more distinct experts get picked. Prefill of N
tokens is compute-bound, ``p0 + N*2*P/F_pre + attention ~ N^2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Datasheet -> achievable. Decode kernels rarely pass ~75% of HBM bandwidth; dense
# prefill GEMMs reach about half of the dense tensor peak in vLLM.
BW_EFFICIENCY = 0.75
PREFILL_FLOPS_EFFICIENCY = 0.5
DECODE_FLOPS_EFFICIENCY = 0.35
STEP_OVERHEAD_S = 1.0e-3
STEP_OVERHEAD_PER_LAYER_S = 0.04e-3
EAGER_OVERHEAD_PER_LAYER_S = 0.1e-3
ALLREDUCE_S = 12e-6
PREFILL_OVERHEAD_S = 5e-3


@dataclass(frozen=True)
class LatencyParams:
    """Constants of the step-time model for one (GPU, model, dtype, TP) setting."""

    t0_s: float
    bw_eff_bytes_per_s: float
    decode_flops_eff: float
    prefill_flops_eff: float
    p0_s: float
    itl_percentile_factor: float = 1.0


def expert_fraction(
    batch: np.ndarray, experts: np.ndarray, top_k: np.ndarray
) -> np.ndarray:
    """Expected share of a layer's experts that a batch of B tokens touches."""
    safe_e = np.maximum(experts, 1)
    frac = 1.0 - np.power(1.0 - np.minimum(top_k, safe_e) / safe_e, batch)
    return np.where(experts > 0, frac, 0.0)


def decode_step_s(
    batch: np.ndarray,
    context: np.ndarray,
    *,
    dense_weight_bytes: np.ndarray,
    expert_weight_bytes: np.ndarray,
    experts: np.ndarray,
    top_k: np.ndarray,
    kv_bytes_per_token: np.ndarray,
    active_params_per_gpu: np.ndarray,
    t0_s: np.ndarray,
    bw_eff: np.ndarray,
    decode_flops: np.ndarray,
    expert_batch_factor: np.ndarray | float = 1.0,
) -> np.ndarray:
    # Under expert parallelism the tokens of every DP rank meet in one EP group, so
    # a rank's experts see batch x DP tokens.
    weights = dense_weight_bytes + expert_weight_bytes * expert_fraction(
        batch * expert_batch_factor, experts, top_k
    )
    memory = (weights + batch * context * kv_bytes_per_token) / bw_eff
    compute = batch * 2.0 * active_params_per_gpu / decode_flops
    return t0_s + memory + compute


def prefill_s(
    tokens: np.ndarray,
    *,
    active_params_per_gpu: np.ndarray,
    attn_flops_per_token2: np.ndarray,
    prefill_flops: np.ndarray,
    p0_s: np.ndarray,
) -> np.ndarray:
    linear = tokens * 2.0 * active_params_per_gpu / prefill_flops
    attention = tokens * tokens * attn_flops_per_token2 / prefill_flops
    return p0_s + linear + attention
