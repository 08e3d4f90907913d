"""Result reasons: a result's code turned into words, vLLM's where vLLM refuses.

``CONFIG_TIME`` codes are refused before weights load (``evaluate`` raises
``Refused``); ``refusals.STARTUP_CODES`` after profiling (``starts`` False).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analytics.capacity import refusals
from analytics.capacity.scenario import Scenario

_REASONS = {
    "itl_sla": "no batch size meets the ITL SLA (even batch 1 is too slow)",
    "ttft_sla": "the prompt's prefill alone exceeds the TTFT SLA",
    "kv_cache_too_small_for_request": "the KV cache cannot hold one request of this "
    "shape (prompt + output tokens)",
    "not_modelled": "speculative decoding and LoRA are not modelled: no figure is "
    "given rather than a wrong one",
}
CONFIG_TIME = {
    "tp_not_integer", "tp_not_positive", "tp_on_mig", "tp_heads", "tp_kv_heads",
    "ep_without_experts", "max_model_len_above_derived", "batched_tokens_below_seqs",
    "batched_tokens_below_max_model_len",
}  # fmt: skip
REFUSAL_CODES = frozenset(CONFIG_TIME | refusals.STARTUP_CODES)


def reason_text(
    code: str, row: Mapping[str, Any], static: Mapping[str, Any]
) -> str | None:
    if not code:
        return None
    refusal = static.get("refusal")
    if refusal is not None and code == refusal.code:
        return str(refusal.reason)
    if code == "max_model_len_above_derived":
        return refusals.max_model_len_above_derived(
            row["max_model_len"], int(row["max_position"])
        )
    if code == "batched_tokens_below_seqs":
        return refusals.batched_tokens_below_seqs(
            row["max_num_batched_tokens"], row["max_num_seqs"]
        )
    if code == "batched_tokens_below_max_model_len":
        return refusals.batched_tokens_below_max_model_len(
            row["max_num_batched_tokens"], row["max_model_len"]
        )
    if code == "no_kv_memory":
        return (
            f"{refusals.NO_KV_MEMORY} (weights, activations and non-torch memory "
            "exceed total_gpu_memory x gpu_memory_utilization)"
        )
    if code == "max_model_len_exceeds_pool":
        estimate = row["estimated_max_len"]
        return refusals.max_model_len_exceeds_pool(
            v1=bool(row["v1"]),
            max_model_len=row["max_model_len"],
            needed_bytes=float(row["needed_bytes"]),
            available_bytes=max(float(row["kv_cache_memory_bytes"]), 0.0),
            estimated_max_len=int(estimate) if np.isfinite(estimate) else 0,
            pool_tokens=int(row["kv_cache_tokens"]),
        )
    if code == "prompt_longer_than_max_model_len":
        return "every request of this shape is rejected: " + refusals.prompt_too_long(
            row["max_model_len"], row["prompt"]
        )
    return _REASONS.get(code, code)


def row_warnings(row: Mapping[str, Any], scenario: Scenario) -> list[str]:
    warnings = []
    if row["above_derived"] and scenario.allow_long_max_model_len:
        warnings.append(
            f"max_model_len {int(row['max_model_len'])} is above the model's "
            f"{int(row['max_position'])}: accepted only because "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; positions beyond it may give NaN or "
            "wrong outputs"
        )
    if row["prompt"] + scenario.output_tokens > row["max_model_len"] > row["prompt"]:
        warnings.append(
            f"prompt {int(row['prompt'])} + output {scenario.output_tokens} exceeds "
            f"max_model_len {int(row['max_model_len'])}: outputs end at "
            "max_model_len (finish_reason=length), or vLLM rejects requests that set "
            "max_tokens"
        )
    if scenario.kv_cache_memory_bytes is not None:
        warnings.append(
            "kv_cache_memory_bytes given: vLLM skips memory profiling and does not "
            "check that weights and activations still fit"
        )
    if scenario.data_parallel_size > 1:
        warnings.append(
            f"data_parallel_size {scenario.data_parallel_size}: figures per replica "
            "add all DP ranks; KV pool and batch are per rank; all-to-all time of "
            "expert parallelism is not modelled"
        )
    return warnings


def refused_field(
    code: str, static: Mapping[str, Any], scenario: Scenario
) -> tuple[str, Any]:
    refusal = static.get("refusal")
    if refusal is not None and refusal.code == code:
        return refusal.field, refusal.value
    if code == "max_model_len_above_derived":
        return "max_model_len", scenario.max_model_len
    if code in {"batched_tokens_below_seqs", "batched_tokens_below_max_model_len"}:
        return "max_num_batched_tokens", scenario.max_num_batched_tokens
    return "scenario", code  # pragma: no cover - every config-time code is above
