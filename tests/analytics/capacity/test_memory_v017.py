"""Memory terms that follow vLLM 0.14-0.19 code (docs/capacity.md, by version)."""

from __future__ import annotations

import pytest

from analytics.capacity import memory as mem
from analytics.capacity.engine import Scenario, evaluate

GiB = 1024**3
MiB = 1024**2


def _qwen3_14b(version: str, **kw: object) -> Scenario:
    return Scenario(
        model="Qwen3-14B", gpu="H100-SXM", engine_version=version,
        gpu_memory_utilization=0.95, max_model_len=8192, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_from_0_17_the_sampler_share_is_counted_tensor_by_tensor() -> None:
    # 0.16: the PyTorch sort path, 38.7 B per max_num_seqs x vocab entry.
    old = evaluate(_qwen3_14b("0.16.0"))
    assert old.activation_bytes == pytest.approx(1024 * 151936 * 38.7)
    # 0.17: Triton top-k/top-p; bf16 logits + fp32 logits + probs + q = 14 B,
    # plus the hidden states profile_run holds (8192 + 2 x 1024 rows of 5120 bf16)
    # and the cached Triton buffer (132 SMs x vocab fp32).
    new = evaluate(_qwen3_14b("0.17.0"))
    held = 2 * 5120 * (8192 + 2 * 1024) + 132 * 151936 * 4
    assert new.activation_bytes == pytest.approx(1024 * 151936 * 14 + held)
    # The pool grows by what the sampler no longer holds (about 3.4 GiB).
    grown = new.kv_cache_memory_bytes - old.kv_cache_memory_bytes
    assert 3.3 * GiB < grown < 3.5 * GiB
    assert evaluate(_qwen3_14b("0.18.0")).activation_bytes == new.activation_bytes


def test_fewer_than_eight_sampled_rows_still_take_the_sort() -> None:
    # apply_top_k_top_p: `HAS_TRITON and logits.shape[0] >= 8`, else the sort.
    result = evaluate(_qwen3_14b("0.19.0", max_num_seqs=4, max_num_batched_tokens=8))
    assert result.activation_bytes == pytest.approx(
        max(4 * 151936 * mem.SAMPLER_BYTES_V1, 8 * 2 * (3 * 5120 + 3 * 17408))
    )


def test_the_triton_buffer_rows_follow_next_pow2_capped_by_the_sms() -> None:
    held = mem.sampler_held_bytes(0, 20, 0, 1000, 132)
    assert float(held) == 32 * 1000 * 4  # min(next_pow2(20), 132) rows
    assert float(mem.sampler_held_bytes(0, 1024, 0, 1000, 132)) == 132 * 1000 * 4
    assert float(mem.sampler_held_bytes(0, 1024, 0, 1000, 0)) == 0.0


def _llama_tp(version: str, gpu: str = "H100-SXM", tp: int = 2, **kw: object) -> float:
    scenario = Scenario(
        model="Llama-3.1-8B", gpu=gpu, tp=tp, engine_version=version,
        max_model_len=8192, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    return evaluate(scenario).non_torch_bytes


def test_flashinfer_allreduce_fusion_workspace_from_0_17_on_hopper_at_tp2() -> None:
    # max size 64 MiB at TP 2 on capability 9.0: 8192 tokens x 4096 x 2 B;
    # buffers of 2 x 64 MiB, the flags (2 MiB) and 3 x 128 MiB (Lamport).
    workspace = (128 + 2 + 384) * MiB
    base = mem.NON_TORCH_TP_NVLINK_V1_TOTAL
    assert _llama_tp("0.16.0") == pytest.approx(base)
    assert _llama_tp("0.17.0") == pytest.approx(base + workspace)
    # TP 4: 2 MiB max size, 256 tokens of 4096: 4 x 2 MiB, the flags, 3 x 8 MiB.
    assert _llama_tp("0.19.0", tp=4) == pytest.approx(base + (8 + 2 + 24) * MiB)
    # Not on an A100 (capability 8.0), not under enforce_eager, not with DP > 1.
    assert _llama_tp("0.19.0", gpu="A100-80GB") == pytest.approx(base)
    assert _llama_tp("0.19.0", enforce_eager=True) == pytest.approx(base)
    assert _llama_tp("0.19.0", data_parallel_size=2) == pytest.approx(base)
    assert _llama_tp("0.19.0", tp=1) == pytest.approx(mem.NON_TORCH_BASE)


def test_the_workspace_is_capped_by_the_batched_tokens() -> None:
    ws = mem.fi_allreduce_workspace_bytes(64 * MiB, 2, 8192, 2048)
    # min(64 MiB / (8192 x 2), 2048) = 2048 tokens: 2 x 2048 x 8192 x 2 = 64 MiB.
    assert float(ws) == (64 + 2 + 192) * MiB


def test_moe_workspace_shapes_by_version() -> None:
    # Qwen3-30B-A3B at 8192 tokens, top 8, N = 2 x 768, K = 2048.
    legacy = mem.moe_workspace_bytes(8192, 8, 768, 2048, 1, False)
    modular = mem.moe_workspace_bytes(8192, 8, 768, 2048, 1, True)
    assert float(legacy) == 8192 * 8 * (2048 + 768) * 2
    assert float(modular) == 8192 * 8 * (2048 + 2048) * 2
    scenario = dict(model="Qwen3-30B-A3B", gpu="H100-SXM", max_model_len=8192)
    before = evaluate(Scenario(engine_version="0.13.0", **scenario))  # type: ignore[arg-type]
    after = evaluate(Scenario(engine_version="0.14.0", **scenario))  # type: ignore[arg-type]
    # 0.13: the sampler's run alone is the peak; 0.14: the workspace is added.
    assert before.activation_bytes == pytest.approx(1024 * 151936 * 38.7)
    assert after.activation_bytes == pytest.approx(1024 * 151936 * 38.7 + modular)
