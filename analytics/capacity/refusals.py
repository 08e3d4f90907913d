"""What vLLM refuses, in vLLM's own words.

Two kinds of refusal, because vLLM makes them at two moments:

* **config time** (argument parsing, ``ModelConfig``/``SchedulerConfig`` checks and
  the attention layers' asserts): vLLM exits before loading weights. ``evaluate``
  raises ``Refused`` (an ``InvalidInput`` naming field and value); the grid and the
  search keep the row with ``starts`` False and the reason.
* **start-up** (after profiling, when the KV pool is sized): the engine returns a
  Result with ``feasible`` and ``starts`` False and vLLM's message.

Each message is the one vLLM prints, with the numbers filled in; ``SOURCES`` says
which vLLM file and function prints it. Tests pin the wording.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analytics.capacity.catalog import ModelSpec

GiB = 1024**3

SOURCES = {
    "tp_not_integer": "vllm/engine/arg_utils.py (argparse type=int for "
    "--tensor-parallel-size)",
    "tp_not_positive": "vllm/config.py ParallelConfig (world_size = pp x tp must be "
    ">= 1)",
    "tp_on_mig": "NVIDIA MIG user guide: no P2P/NVLink between MIG instances, NCCL "
    "cannot form a TP group across them",
    "tp_heads": "vllm/config.py ModelConfig.verify_with_parallel_config",
    "tp_kv_heads": "vllm/model_executor/models/llama.py LlamaAttention.__init__ "
    "(assert; same in qwen2, mistral, ...)",
    "ep_without_experts": "vllm/config.py ModelConfig._verify_with_expert_parallelism",
    "max_model_len_above_derived": "vllm/config.py _get_and_verify_max_len",
    "batched_tokens_below_seqs": "vllm/config.py SchedulerConfig._verify_args",
    "batched_tokens_below_max_model_len": "vllm/config.py SchedulerConfig._verify_args",
    "no_kv_memory": "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; "
    "V0: vllm/worker/worker.py raise_if_cache_size_invalid",
    "max_model_len_exceeds_pool": "vllm/v1/core/kv_cache_utils.py "
    "check_enough_kv_cache_memory (estimate_max_model_len); V0: "
    "vllm/worker/worker.py raise_if_cache_size_invalid",
}

# Refusals made after profiling: the configuration is valid but does not start.
STARTUP_CODES = frozenset({"no_kv_memory", "max_model_len_exceeds_pool"})


@dataclass(frozen=True)
class Refusal:
    code: str
    field: str
    value: Any
    reason: str

    @property
    def source(self) -> str:
        return SOURCES[self.code]


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and number == int(number)


def check_static(
    model: ModelSpec,
    *,
    tp: Any,
    mig_profile: str | None,
    data_parallel_size: Any,
    enable_expert_parallel: bool,
) -> tuple[Refusal | None, list[str]]:
    """Config-time checks that depend on names only (model, TP, MIG, EP).

    Returns the first refusal vLLM would make (in vLLM's order: argument parsing,
    then ModelConfig, then the attention layer) and warnings for what it accepts.
    """
    warnings: list[str] = []
    if not _is_integral(tp):
        return Refusal(
            "tp_not_integer",
            "tp",
            tp,
            f"argument --tensor-parallel-size/-tp: invalid int value: '{tp}'",
        ), warnings
    tp = int(float(tp))
    if tp < 1:
        return Refusal(
            "tp_not_positive",
            "tp",
            tp,
            f"tensor_parallel_size must be a positive integer, got {tp}",
        ), warnings
    if not _is_integral(data_parallel_size) or int(float(data_parallel_size)) < 1:
        return Refusal(
            "tp_not_integer",
            "data_parallel_size",
            data_parallel_size,
            "argument --data-parallel-size/-dp: invalid int value: "
            f"'{data_parallel_size}'",
        ), warnings
    dp = int(float(data_parallel_size))
    if mig_profile and tp > 1:
        return Refusal(
            "tp_on_mig",
            "tp",
            tp,
            "tensor parallelism across MIG instances is not possible: instances "
            "share no NVLink/P2P path, so one replica must fit one instance",
        ), warnings
    if model.heads % tp != 0:
        return Refusal(
            "tp_heads",
            "tp",
            tp,
            f"Total number of attention heads ({model.heads}) must be divisible by "
            f"tensor parallel size ({tp}).",
        ), warnings
    # MLA caches one latent per token whatever TP, so KV heads do not constrain it.
    if not model.is_mla:
        kv = model.kv_heads
        if kv >= tp and kv % tp != 0:
            return Refusal(
                "tp_kv_heads",
                "tp",
                tp,
                f"AssertionError: assert self.total_num_kv_heads % tp_size == 0 "
                f"(total_num_kv_heads={kv}, tp_size={tp})",
            ), warnings
        if kv < tp and tp % kv != 0:
            return Refusal(
                "tp_kv_heads",
                "tp",
                tp,
                f"AssertionError: assert tp_size % self.total_num_kv_heads == 0 "
                f"(total_num_kv_heads={kv}, tp_size={tp})",
            ), warnings
    if enable_expert_parallel:
        if not model.is_moe:
            return Refusal(
                "ep_without_experts",
                "enable_expert_parallel",
                True,
                "Number of experts in the model must be greater than 0 when "
                "expert parallelism is enabled.",
            ), warnings
        ep = tp * dp
        if model.num_experts % ep:
            # vLLM does not refuse: determine_expert_map gives the remainder to some
            # ranks, and the fullest rank sets the memory every rank must leave.
            warnings.append(
                f"{model.num_experts} experts over EP={ep} ranks do not divide: "
                f"the fullest rank holds {math.ceil(model.num_experts / ep)} experts "
                "(vLLM determine_expert_map), and the model sizes every rank by it"
            )
    elif dp > 1 and model.is_moe:
        warnings.append(
            f"data_parallel_size {dp} without enable_expert_parallel: every DP rank "
            "holds all experts (sharded over its TP group)"
        )
    return None, warnings


def max_model_len_above_derived(max_model_len: float, derived: int) -> str:
    return (
        f"User-specified max_model_len ({int(max_model_len)}) is greater than the "
        f"derived max_model_len (max_position_embeddings={derived} or "
        "model_max_length=None in model's config.json). To allow overriding this "
        "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    )


def batched_tokens_below_seqs(
    max_num_batched_tokens: float, max_num_seqs: float
) -> str:
    return (
        f"max_num_batched_tokens ({int(max_num_batched_tokens)}) must be greater "
        f"than or equal to max_num_seqs ({int(max_num_seqs)})."
    )


def batched_tokens_below_max_model_len(
    max_num_batched_tokens: float, max_model_len: float
) -> str:
    return (
        f"max_num_batched_tokens ({int(max_num_batched_tokens)}) is smaller than "
        f"max_model_len ({int(max_model_len)}). This effectively limits the maximum "
        "sequence length to max_num_batched_tokens and makes vLLM reject longer "
        "sequences. Please increase max_num_batched_tokens or decrease max_model_len."
    )


NO_KV_MEMORY = (
    "No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)


def max_model_len_exceeds_pool(
    *,
    v1: bool,
    max_model_len: float,
    needed_bytes: float,
    available_bytes: float,
    estimated_max_len: int,
    pool_tokens: int,
) -> str:
    if not v1:
        return (
            f"The model's max seq len ({int(max_model_len)}) is larger than the "
            "maximum number of tokens that can be stored in KV cache "
            f"({pool_tokens}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )
    estimate = (
        "Based on the available memory, the estimated maximum model length is "
        f"{estimated_max_len}. "
        if estimated_max_len > 0
        else ""
    )
    return (
        "To serve at least one request with the models's max seq len "
        f"({int(max_model_len)}), ({needed_bytes / GiB:.2f} GiB KV cache is needed, "
        "which is larger than the available KV cache memory "
        f"({available_bytes / GiB:.2f} GiB). {estimate}Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."
    )


def prompt_too_long(max_model_len: float, prompt_tokens: float) -> str:
    """The OpenAI server's answer (HTTP 400) to a prompt of max_model_len or more."""
    return (
        f"This model's maximum context length is {int(max_model_len)} tokens. "
        f"However, your request has {int(prompt_tokens)} input tokens. Please "
        "reduce the length of the input messages."
    )


@dataclass(frozen=True)
class RejectedShare:
    """Share of requests a max_model_len would reject, bounded by histogram edges."""

    max_model_len: int
    rejected_at_least: float
    rejected_at_most: float
    truncated_at_least: float
    truncated_at_most: float
    requests: float

    def message(self) -> str:
        return (
            f"max_model_len {self.max_model_len}: at least "
            f"{self.rejected_at_least:.1%}, at most {self.rejected_at_most:.1%} of "
            "observed requests have a prompt vLLM rejects (HTTP 400); a further "
            f"{self.truncated_at_least:.1%} to {self.truncated_at_most:.1%} would end "
            "at max_model_len (finish_reason=length)"
        )


def rejected_share(
    *,
    upper_edges: Sequence[float],
    counts: Sequence[float],
    max_model_len: int,
    output_tokens: float = 0.0,
) -> RejectedShare | None:
    """Bound the requests a ``max_model_len`` rejects, from the prompt histogram.

    ``upper_edges`` are the ``le`` bounds of ``vllm:request_prompt_tokens`` buckets
    (the last may be +inf) and ``counts`` the requests per bucket (not cumulative).
    A bucket wholly at or above ``max_model_len`` counts in both bounds; one that
    straddles it only in the upper bound. Truncation uses the same rule on the
    prompts within ``output_tokens`` of the limit (prompt + output > max_model_len).
    Returns None when there are no requests: missing is not zero.
    """
    edges = np.asarray(upper_edges, dtype=float)
    n = np.asarray(counts, dtype=float)
    if edges.shape != n.shape or edges.size == 0:
        return None
    total = float(np.nansum(n))
    if not total > 0:
        return None
    lower = np.concatenate([[0.0], edges[:-1]])

    def bounds(limit: float) -> tuple[float, float]:
        # Prompt p is "over" when p >= limit; bucket holds (lower, upper].
        sure = lower >= limit - 1
        maybe = edges >= limit
        return float(n[sure].sum() / total), float(n[maybe].sum() / total)

    rej_lo, rej_hi = bounds(float(max_model_len))
    trunc_lo_all, trunc_hi_all = bounds(
        float(max_model_len) - float(output_tokens) + 1.0
    )
    return RejectedShare(
        max_model_len=int(max_model_len),
        rejected_at_least=rej_lo,
        rejected_at_most=rej_hi,
        truncated_at_least=max(0.0, trunc_lo_all - rej_hi),
        truncated_at_most=max(0.0, trunc_hi_all - rej_lo),
        requests=total,
    )
