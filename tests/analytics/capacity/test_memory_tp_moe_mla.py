"""The three terms added in the second round, each hand-computed: per-GPU non-torch
memory under TP (NVLink boards, V1), the fused-MoE workspace in the forward peak,
and V0's 256-byte padding of MLA KV entries (0.7.2 - 0.7.x)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analytics.capacity import Scenario, evaluate
from analytics.capacity import memory as mem

GiB = 1024**3


def test_non_torch_memory_by_generation_board_and_tp() -> None:
    tp = np.array([1, 2, 4, 2, 2])
    old_v0 = np.array([False, False, False, False, True])
    nvlink_v1 = np.array([True, True, True, False, False])
    got = mem.non_torch_bytes(old_v0, tp, nvlink_v1)
    # TP 1: 0.1 GiB; NVLink V1 under TP: 1.17 GiB in all; PCIe: 0.1 + 0.35;
    # V0 before 0.7: 0.3 + 0.35.
    assert got == pytest.approx(
        np.array([0.1, 1.17, 1.17, 0.45, 0.65]) * GiB, rel=1e-12
    )


def test_the_engine_applies_the_nvlink_term_only_to_v1_on_nvlink_boards() -> None:
    base = Scenario(
        model="Qwen3-32B", gpu="H100-SXM", tp=2, engine_version="0.11.0",
        max_model_len=16384,
    )  # fmt: skip
    assert evaluate(base).non_torch_bytes == pytest.approx(1.17 * GiB)
    assert evaluate(replace(base, gpu="H100-PCIe")).non_torch_bytes == pytest.approx(
        0.45 * GiB
    )
    v0 = replace(base, engine_version="0.8.5", engine="v0")
    assert evaluate(v0).non_torch_bytes == pytest.approx(0.45 * GiB)
    assert evaluate(replace(base, tp=1)).non_torch_bytes == pytest.approx(0.1 * GiB)
    # The extra 0.72 GiB comes straight out of the pool.
    pcie_like = evaluate(replace(base, gpu="H100-PCIe"))
    nvlink = evaluate(base)
    budget_gap = (85031714816 - 85022736384) * 0.9  # the two boards' totals
    assert pcie_like.kv_cache_memory_bytes - nvlink.kv_cache_memory_bytes == (
        pytest.approx(0.72 * GiB - budget_gap, rel=1e-9)
    )


def test_fused_moe_workspace_is_cache13_plus_cache2_over_one_chunk() -> None:
    # Qwen3-235B-A22B at TP 4: M = 8192 rows x top-8, N = 2 x 1536 / 4 = 768,
    # K = 4096: cache13 = M*8*max(768, 4096), cache2 = M*8*384, two bytes each.
    got = mem.moe_workspace_bytes(
        np.array([8192.0]), np.array([8]), np.array([1536]), np.array([4096]),
        np.array([4.0]),
    )  # fmt: skip
    assert got[0] == 8192 * 8 * (4096 + 384) * 2 == 587_202_560
    # The chunk caps M at 32768 tokens; a dense model (top_k 0) has none.
    capped = mem.moe_workspace_bytes(
        np.array([65536.0, 8192.0]), np.array([8, 0]), np.array([1536, 0]),
        np.array([4096, 4096]), np.array([4.0, 1.0]),
    )  # fmt: skip
    assert capped[0] == 32768 * 8 * (4096 + 384) * 2
    assert capped[1] == 0


def test_moe_workspace_replaces_the_ffn_term_where_the_forward_is_the_peak() -> None:
    # vLLM 0.13 (fused_experts_impl's caches are freed after each layer): with
    # max_num_seqs 8 the sampler's run is small, so on one H100 the forward pass
    # over 8192 tokens is the peak for Qwen3-30B-A3B:
    # 3 x hidden x 2 B x 8192 + 8192 x 8 x (max(2 x 768, 2048) + 768) x 2 B.
    result = evaluate(
        Scenario(
            model="Qwen3-30B-A3B", gpu="H100-SXM", engine_version="0.13.0",
            max_model_len=8192, max_num_seqs=8,
        )
    )  # fmt: skip
    hidden_part = 8192 * 2 * 3 * 2048
    workspace = 8192 * 8 * (2048 + 768) * 2
    sampler = 8 * 151936 * 38.7
    assert hidden_part + workspace > sampler
    assert result.activation_bytes == pytest.approx(hidden_part + workspace)


def test_from_0_14_the_moe_workspace_is_kept_through_the_sampler_run() -> None:
    # Model Runner V2 (0.29.0) profiles only bf16 logits; TritonExperts' workspaces
    # (M x top_k x max(N/2, K) and M x top_k x max(N, K)) come from the persistent
    # WorkspaceManager, so they are still held when the logits are.
    result = evaluate(
        Scenario(
            model="Qwen3-30B-A3B", gpu="H100-SXM", engine_version="0.29.0",
            max_model_len=8192,
        )
    )  # fmt: skip
    workspace = 8192 * 8 * (2048 + 2048) * 2
    sampler = 1024 * 151936 * 2
    assert result.activation_bytes == pytest.approx(sampler + workspace)


def test_v0_pads_mla_entries_to_256_bytes_only_in_0_7_2_to_0_7_x() -> None:
    # DeepSeek-V2-Lite: 27 layers, latent 512 + rope 64 = 576 elements per token.
    padded = mem.kv_bytes_per_token(27, 16, 192, 1, 2.0, 512, 64, True)
    plain = mem.kv_bytes_per_token(27, 16, 192, 1, 2.0, 512, 64, False)
    assert float(padded) == 640 * 27 * 2 == 34_560
    assert float(plain) == 576 * 27 * 2 == 31_104
    # fp8 KV: still 640 elements (aligned in the 16-bit model dtype), 1 byte each.
    assert float(mem.kv_bytes_per_token(27, 16, 192, 1, 1.0, 512, 64, True)) == (
        640 * 27
    )

    def per_token(version: str, engine: str) -> float:
        scenario = Scenario(
            model="DeepSeek-V2-Lite", gpu="H100-SXM", engine_version=version,
            engine=engine, max_model_len=4096,
        )  # fmt: skip
        return evaluate(scenario).kv_bytes_per_token

    assert per_token("0.7.3", "v0") == 34_560
    assert per_token("0.7.1", "v0") == 31_104  # before PR #12676
    assert per_token("0.8.0", "v0") == 31_104  # PR #14842 removed it
    assert per_token("0.7.3", "v1") == 31_104  # V1's MLA spec never padded
