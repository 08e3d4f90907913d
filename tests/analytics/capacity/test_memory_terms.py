"""Memory terms that depend on flags and checkpoints: EP/DP, mixed precision,
rope-scaled limits, prefix-cache hits, and the inline architecture in the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from analytics.capacity import Scenario, evaluate
from analytics.capacity.catalog import get_model, model_from_hf_config

ROOT = Path(__file__).resolve().parents[3]
MOE = Scenario(model="Qwen3-235B-A22B", gpu="H100-SXM", tp=4, max_model_len=8192)
# Routed experts of Qwen3-235B-A22B: 3 matrices x 4096 x 1536 x 128 experts x 94.
EXPERT_BYTES = 3 * 4096 * 1536 * 128 * 94 * 2.0

QWEN3_8B = {
    "model_type": "qwen3",
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
}


def test_a_moe_that_needs_eight_gpus_runs_on_tp4_with_expert_parallel_dp2() -> None:
    tp_only = evaluate(MOE)
    assert not tp_only.starts and tp_only.refusal == "no_kv_memory"
    ep = evaluate(replace(MOE, data_parallel_size=2, enable_expert_parallel=True))
    assert ep.feasible and ep.starts
    # Per GPU: dense weights / TP, experts / EP (= TP x DP = 8) instead of / TP.
    assert tp_only.weights_bytes - ep.weights_bytes == pytest.approx(
        EXPERT_BYTES / 4 - EXPERT_BYTES / 8
    )
    # A replica is DP ranks x TP GPUs; each rank has its own KV pool.
    assert ep.gpu_share_per_replica == 8


def test_experts_that_do_not_divide_over_ep_size_the_fullest_rank() -> None:
    # 128 experts over EP = 2 x 3 = 6 ranks: vLLM gives some ranks 22, others 21.
    result = evaluate(
        replace(MOE, tp=2, data_parallel_size=3, enable_expert_parallel=True)
    )
    dense_per_gpu = evaluate(replace(MOE, tp=2)).weights_bytes - EXPERT_BYTES / 2
    assert result.weights_bytes == pytest.approx(
        dense_per_gpu + EXPERT_BYTES * math.ceil(128 / 6) / 128
    )
    assert any("fullest rank holds 22 experts" in w for w in result.warnings)


def test_data_parallel_ranks_add_throughput_per_replica() -> None:
    one = evaluate(Scenario(model="Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192))
    two = evaluate(replace(one.scenario, data_parallel_size=2))
    assert two.throughput_tokens_per_s == pytest.approx(2 * one.throughput_tokens_per_s)
    assert two.kv_cache_tokens == one.kv_cache_tokens  # one pool per rank
    assert two.gpu_share_per_replica == 2


def test_layers_an_fp8_checkpoint_keeps_in_bf16_are_sized_at_two_bytes() -> None:
    fp8_all = model_from_hf_config(
        {**QWEN3_8B, "quantization_config": {"quant_method": "fp8"}}, name="all"
    )
    mixed = model_from_hf_config(
        {
            **QWEN3_8B,
            "quantization_config": {
                "quant_method": "fp8",
                "ignored_layers": [
                    "model.layers.0.self_attn",
                    "re:model.layers.1.mlp.down_proj",
                ],
            },
        },
        name="mixed",
    )
    layer0_attn = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128
    layer1_down = 4096 * 12288
    assert fp8_all.unquantized_params == 0
    assert mixed.unquantized_params == layer0_attn + layer1_down
    base = Scenario(
        model=fp8_all, gpu="H100-SXM", weight_dtype="fp8", max_model_len=8192
    )
    extra = (
        evaluate(replace(base, model=mixed)).weights_bytes
        - evaluate(base).weights_bytes
    )
    assert extra == pytest.approx((layer0_attn + layer1_down) * (2.0 - 1.0))


def test_bitsandbytes_modules_to_not_convert_match_as_substrings() -> None:
    spec = model_from_hf_config(
        {
            **QWEN3_8B,
            "quantization_config": {"modules_to_not_convert": ["o_proj"]},
        }
    )
    assert spec.unquantized_params == 36 * 32 * 128 * 4096


def test_rope_scaling_sets_the_derived_max_model_len_as_vllm_does() -> None:
    yarn = model_from_hf_config(
        {
            **QWEN3_8B,
            "max_position_embeddings": 32768,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
            },
        }
    )
    assert yarn.max_position == 131072
    llama3 = model_from_hf_config(
        {
            **QWEN3_8B,
            "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
        }
    )
    assert llama3.max_position == 131072


def test_prefix_cache_hits_cut_prefill_not_decode() -> None:
    base = Scenario(
        model="Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192, prompt_tokens=3000
    )
    cold = evaluate(base)
    warm = evaluate(replace(base, prefix_cache_hit_rate=0.5))
    assert warm.prefill_ms < cold.prefill_ms * 0.75
    assert warm.decode_step_ms <= cold.decode_step_ms
    assert warm.kv_cache_tokens == cold.kv_cache_tokens


def _cli(document: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analytics.capacity"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_the_cli_sizes_a_model_given_inline_as_config_json_fields() -> None:
    done = _cli(
        {
            "model": {"name": "my-qwen3-8b", **QWEN3_8B},
            "gpu": "H100-SXM",
            "max_model_len": 8192,
        }
    )
    assert done.returncode == 0, done.stdout
    out = json.loads(done.stdout)
    # 2 x 36 layers x 8 KV heads x 128 x 2 bytes.
    assert out["kv_bytes_per_token"] == 2 * 36 * 8 * 128 * 2
    assert out["starts"] is True


def test_the_cli_names_what_is_wrong_in_an_inline_architecture_without_a_traceback() -> (
    None
):
    done = _cli({"model": {"hidden_size": 4096}, "gpu": "H100-SXM"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    out = json.loads(done.stdout)
    assert out["field"] == "config.num_hidden_layers"
    bad_type = _cli({"model": 42, "gpu": "H100-SXM"})
    assert bad_type.returncode == 2 and "Traceback" not in bad_type.stderr
    assert json.loads(bad_type.stdout)["field"] == "model"


def test_the_catalogue_spec_has_no_unquantized_layers() -> None:
    assert get_model("Llama-3.1-8B").unquantized_params == 0


def test_the_sampler_share_of_the_profiled_peak_follows_the_model_runner() -> None:
    base = Scenario(model="Llama-3.1-8B", gpu="H100-SXM", max_model_len=16000)
    # V1 runner (0.8 to 0.27): top-k/top-p sampler over 1024 x 128256 logits,
    # ~38.7 bytes each, dominates the 8192-token forward pass.
    v1 = evaluate(replace(base, engine_version="0.11.0"))
    assert v1.activation_bytes == pytest.approx(1024 * 128256 * 38.7)
    # Model Runner V2 (dense models from 0.28.0): only bf16 logits; the forward
    # pass sets the peak, and the pool grows by the difference.
    mrv2 = evaluate(replace(base, engine_version="0.28.0", estimate_cudagraphs=False))
    assert mrv2.activation_bytes < v1.activation_bytes / 3
    assert mrv2.kv_cache_tokens > v1.kv_cache_tokens
    # The flag overrides the version's default either way.
    forced = evaluate(replace(base, engine_version="0.11.0", model_runner_v2=True))
    assert forced.activation_bytes == pytest.approx(mrv2.activation_bytes)
    # MoE models moved to Model Runner V2 only in 0.29.0.
    moe = Scenario(model="Qwen3-30B-A3B", gpu="H100-SXM", max_model_len=16000)
    old_runner = evaluate(replace(moe, engine_version="0.28.0"))
    new_runner = evaluate(replace(moe, engine_version="0.29.0"))
    assert new_runner.activation_bytes < old_runner.activation_bytes
    # V0 and V1 before 0.8.0 (sampler not profiled) keep their own figures.
    early_v1 = evaluate(replace(base, engine_version="0.7.3", engine="v1"))
    assert early_v1.activation_bytes < v1.activation_bytes / 3
