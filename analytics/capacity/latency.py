"""Step-time model: roofline defaults, replaced by calibration where it exists.

Decode is memory-bound: one step at batch B and mean context C reads the weights
once and every sequence's KV, ``t = t0 + (W(B) + B*C*kv) / BW_eff + B*2*P/F_dec``.
For MoE, W(B) grows with B because more distinct experts get picked. Prefill of N
tokens is compute-bound, ``p0 + N*2*P/F_pre + attention ~ N^2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    # The tail: the ITL percentile over the mean ITL in steps that carry no
    # prefill chunk, and the share of a co-scheduled chunk's compute time that
    # shows in the ITL percentile once more than 1 - percentile of the steps
    # carry one (1.0: the step runs the chunk and the decodes back to back, as
    # vLLM's chunked prefill does). Both fitted by ``tail.fit_tail``.
    itl_percentile_factor: float = 1.0
    stall_fraction: float = 1.0


def expert_fraction(
    batch: np.ndarray, experts: np.ndarray, top_k: np.ndarray
) -> np.ndarray:
    """Expected share of a layer's experts that a batch of B tokens touches."""
    safe_e = np.maximum(experts, 1)
    frac = 1.0 - np.power(1.0 - np.minimum(top_k, safe_e) / safe_e, batch)
    return np.where(experts > 0, frac, 0.0)


def decode_step_s(batch: np.ndarray, context: np.ndarray, **terms: Any) -> np.ndarray:
    """One decode step in seconds: the sum of ``decode_step_parts`` (same
    keyword arguments)."""
    overhead, memory, compute = decode_step_parts(batch, context, **terms)
    return overhead + memory + compute


def decode_step_parts(
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A decode step's fixed overhead, memory reads (weights and KV cache at
    the bandwidth) and compute, in seconds; the step is their sum."""
    # Under expert parallelism the tokens of every DP rank meet in one EP group, so
    # a rank's experts see batch x DP tokens.
    weights = dense_weight_bytes + expert_weight_bytes * expert_fraction(
        batch * expert_batch_factor, experts, top_k
    )
    memory = (weights + batch * context * kv_bytes_per_token) / bw_eff
    compute = batch * 2.0 * active_params_per_gpu / decode_flops
    return np.broadcast_to(t0_s, np.shape(memory)), memory, compute


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


def percentile_itl_s(
    base: np.ndarray,
    mean: np.ndarray,
    *,
    chunk_s: np.ndarray,
    share_with_prefill: np.ndarray,
    percentile: np.ndarray | float,
    factor: np.ndarray | float = 1.0,
    stall: np.ndarray | float = 1.0,
) -> np.ndarray:
    """ITL at ``percentile``: once more than ``1 - percentile`` of the steps carry
    a prefill chunk, the percentile falls in such a step (the decode step plus
    ``stall`` x the chunk); never below ``factor`` x the mean ITL."""
    spike = np.where(share_with_prefill > (1.0 - percentile), chunk_s * stall, 0.0)
    return np.maximum(base + spike, mean * factor)


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
    expert_batch_factor: float = 1.0
    itl_percentile_factor: float = 1.0
    stall_fraction: float = 1.0
    # A preempted sequence finds its own blocks still cached when it resumes.
    # vLLM V1 enables prefix caching by default ("V1 turns on prefix caching by
    # default", vLLM's tests/v1/engine/test_engine_args.py); V0 does not.
    prefix_caching: bool = False

    def decode_step_s(self, batch: float, context: float) -> float:
        return float(
            decode_step_s(
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
                expert_batch_factor=self.expert_batch_factor,
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
