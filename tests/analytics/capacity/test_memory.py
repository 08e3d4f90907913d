from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.capacity import Scenario, evaluate
from analytics.capacity.catalog import get_model, model_from_hf_config
from analytics.capacity.memory import (
    blocks_from_memory,
    concurrency_for_shape,
    kv_bytes_per_token,
)


def test_gqa_kv_bytes_per_token_for_llama_8b_is_128_kib() -> None:
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert kv_bytes_per_token(32, 8, 128, 1, 2.0) == 131072


def test_tp_splits_kv_heads_but_never_below_one_head() -> None:
    # Llama-3.1-70B: 8 KV heads; TP 4 -> 2 heads per rank; TP 16 -> replicated to 1.
    assert kv_bytes_per_token(80, 8, 128, 4, 2.0) == 2 * 80 * 2 * 128 * 2
    assert kv_bytes_per_token(80, 8, 128, 16, 2.0) == 2 * 80 * 1 * 128 * 2


def test_fp8_kv_halves_the_bytes_per_token() -> None:
    assert kv_bytes_per_token(32, 8, 128, 1, 1.0) == 65536


def test_mla_caches_latent_plus_rope_key_and_tp_does_not_divide_it() -> None:
    lite = get_model("DeepSeek-V2-Lite")
    expected = (512 + 64) * 27 * 2
    for tp in (1, 2, 4):
        got = kv_bytes_per_token(
            lite.layers,
            lite.kv_heads,
            lite.head_dim,
            tp,
            2.0,
            lite.kv_lora_rank,
            lite.qk_rope_head_dim,
        )
        assert got == expected


def test_blocks_are_floored_and_tokens_are_blocks_times_block_size() -> None:
    memory = np.array([131072 * 16 * 10 + 131072 * 15.0])
    assert blocks_from_memory(memory, np.array([16.0]), np.array([131072.0]))[0] == 10


def test_concurrency_counts_whole_blocks_per_request_and_caps_at_max_num_seqs() -> None:
    # 1000 tokens -> 63 blocks of 16; 6300 blocks hold 100 such requests.
    got = concurrency_for_shape(
        np.array([6300]), np.array([16.0]), np.array([1000.0]), np.array([256.0])
    )
    assert got[0] == 100
    capped = concurrency_for_shape(
        np.array([6300]), np.array([16.0]), np.array([1000.0]), np.array([64.0])
    )
    assert capped[0] == 64


def test_hf_config_import_matches_the_catalogue_for_llama_8b() -> None:
    config = {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
    }
    spec = model_from_hf_config(config, name="llama")
    assert spec.params_total == get_model("Llama-3.1-8B").params_total
    assert spec.kv_heads == 8 and spec.head_dim == 128


def test_hf_config_import_reads_moe_and_sliding_window() -> None:
    gemma = model_from_hf_config(
        {
            "model_type": "gemma2",
            "num_hidden_layers": 42,
            "hidden_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "vocab_size": 256000,
            "intermediate_size": 14336,
            "sliding_window": 4096,
            "tie_word_embeddings": True,
        }
    )
    assert gemma.sliding_window == 4096 and gemma.sliding_window_layers == 21
    moe = model_from_hf_config(
        {
            "model_type": "qwen3_moe",
            "num_hidden_layers": 48,
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "vocab_size": 151936,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_experts": 128,
            "num_experts_per_tok": 8,
        }
    )
    assert moe.is_moe and moe.params_active < moe.params_total / 5


def test_hf_config_import_names_the_missing_field() -> None:
    with pytest.raises(ValueError, match=r"config\.num_hidden_layers"):
        model_from_hf_config({"hidden_size": 10})


BASE = Scenario(model="Llama-3.1-8B", gpu="A100-80GB", max_model_len=8192)


def test_v1_pool_does_not_depend_on_max_model_len_but_v0_pool_does() -> None:
    v1 = [
        evaluate(
            replace(BASE, engine_version="0.10.1", max_model_len=m)
        ).kv_cache_tokens
        for m in (2048, 8192, 32768)
    ]
    assert len(set(v1)) == 1
    v0 = [
        evaluate(replace(BASE, engine_version="0.6.4", max_model_len=m)).kv_cache_tokens
        for m in (2048, 8192, 32768)
    ]
    assert v0[0] > v0[1] > v0[2]


def test_enforce_eager_drops_cuda_graph_memory_in_versions_that_count_it() -> None:
    graphs = evaluate(replace(BASE, engine_version="0.21.0"))
    eager = evaluate(replace(BASE, engine_version="0.21.0", enforce_eager=True))
    assert graphs.cuda_graph_bytes > 0 and eager.cuda_graph_bytes == 0
    assert eager.kv_cache_tokens > graphs.kv_cache_tokens


def test_cuda_graphs_are_deducted_only_where_the_profiler_flag_is_on() -> None:
    # Off by default before v0.21.0 (PR #30515 added it off), on from v0.21.0; the
    # scenario's flag (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS) overrides both.
    assert evaluate(replace(BASE, engine_version="0.11.0")).cuda_graph_bytes == 0
    assert evaluate(replace(BASE, engine_version="0.20.1")).cuda_graph_bytes == 0
    on_old = evaluate(replace(BASE, engine_version="0.20.1", estimate_cudagraphs=True))
    off_new = evaluate(
        replace(BASE, engine_version="0.21.0", estimate_cudagraphs=False)
    )
    assert on_old.cuda_graph_bytes > 0 and off_new.cuda_graph_bytes == 0
    # V0 captured graphs after sizing the pool: never deducted.
    v0 = evaluate(replace(BASE, engine_version="0.6.4", estimate_cudagraphs=True))
    assert v0.cuda_graph_bytes == 0


def test_kv_cache_memory_bytes_skips_profiling_and_sets_the_pool() -> None:
    given_pool = evaluate(replace(BASE, kv_cache_memory_bytes=10 * 1024**3))
    # 10 GiB / (16 tokens x 128 KiB) = 5120 blocks, whatever the activations.
    assert given_pool.num_gpu_blocks == 5120
    assert given_pool.kv_cache_tokens == 5120 * 16
    assert any("skips memory profiling" in w for w in given_pool.warnings)


def test_int8_kv_is_refused_on_old_versions_naming_the_field() -> None:
    with pytest.raises(ValueError, match="kv_dtype"):
        evaluate(replace(BASE, engine_version="0.6.4", kv_dtype="int8"))


def test_sliding_window_models_warn_when_the_engine_sizes_every_layer_fully() -> None:
    result = evaluate(
        Scenario(
            model="Gemma-2-9B", gpu="L40S", engine_version="0.6.4", max_model_len=8192
        )
    )
    assert any("sliding-window" in w for w in result.warnings)
    hybrid = evaluate(
        Scenario(
            model="Gemma-2-9B", gpu="L40S", engine_version="0.10.1", max_model_len=8192
        )
    )
    assert (
        hybrid.max_concurrency_at_max_model_len
        > result.max_concurrency_at_max_model_len
    )


@settings(max_examples=40, deadline=None)
@given(
    gmu=st.floats(0.5, 0.94),
    extra=st.floats(0.001, 0.05),
    model=st.sampled_from(
        ["Llama-3.1-8B", "Qwen2.5-7B", "Qwen3-30B-A3B", "Mistral-7B"]
    ),
    gpu=st.sampled_from(["A100-80GB", "H100-SXM", "L40S", "H200"]),
    version=st.sampled_from(["0.6.4", "0.10.1", "0.11.0"]),
)
def test_capacity_never_decreases_when_gpu_memory_utilization_increases(
    gmu: float, extra: float, model: str, gpu: str, version: str
) -> None:
    low = evaluate(
        Scenario(
            model=model,
            gpu=gpu,
            gpu_memory_utilization=gmu,
            engine_version=version,
            max_model_len=8192,
        )
    )
    high = evaluate(
        Scenario(
            model=model,
            gpu=gpu,
            gpu_memory_utilization=gmu + extra,
            engine_version=version,
            max_model_len=8192,
        )
    )
    assert high.kv_cache_tokens >= low.kv_cache_tokens
    assert high.max_concurrency >= low.max_concurrency
    assert high.batch_size >= low.batch_size


@settings(max_examples=30, deadline=None)
@given(
    small=st.sampled_from(["A100-40GB", "L4", "A10G", "L40S"]),
    model=st.sampled_from(["Llama-3.2-3B", "Qwen2.5-7B", "Llama-3.1-8B"]),
    factor=st.floats(1.0, 3.0),
)
def test_capacity_never_decreases_when_gpu_memory_increases(
    small: str, model: str, factor: float
) -> None:
    from analytics.capacity.catalog import get_gpu

    base = evaluate(Scenario(model=model, gpu=small, max_model_len=4096))
    spec = get_gpu(small)
    bigger_memory = replace(spec, memory_bytes=int(spec.memory_bytes * factor))
    import analytics.capacity.catalog as catalog

    original = catalog.gpus()[small]
    catalog.gpus()[small] = bigger_memory
    try:
        bigger = evaluate(Scenario(model=model, gpu=small, max_model_len=4096))
    finally:
        catalog.gpus()[small] = original
    assert bigger.kv_cache_tokens >= base.kv_cache_tokens
    assert bigger.max_concurrency >= base.max_concurrency


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(
        ["Llama-3.1-8B", "Qwen3-8B", "Llama-3.1-70B", "DeepSeek-V2-Lite"]
    ),
    gpu=st.sampled_from(["H100-SXM", "H200", "A100-80GB"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    gmu=st.floats(0.6, 0.95),
)
def test_fp8_kv_never_holds_fewer_tokens_than_fp16(
    model: str, gpu: str, tp: int, gmu: float
) -> None:
    common = dict(
        model=model, gpu=gpu, tp=tp, gpu_memory_utilization=gmu, max_model_len=8192
    )
    fp16 = evaluate(Scenario(kv_dtype="fp16", **common))
    fp8 = evaluate(Scenario(kv_dtype="fp8", **common))
    assert fp8.kv_cache_tokens >= fp16.kv_cache_tokens


def test_fine_tunes_resolve_to_the_architecture_they_share() -> None:
    from analytics.capacity.catalog import get_model

    assert get_model("Llama-Guard-3-8B").name == "Llama-3.1-8B"
    assert get_model("qwen2.5-coder-7b").name == "Qwen2.5-7B"
