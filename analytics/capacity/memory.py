"""KV-cache memory model, as each vLLM engine generation sizes its pool.

Everything here works on numpy arrays (one element per scenario) so that the
single-scenario path and the vectorised grid share one implementation.

What vLLM does at start-up (worker ``determine_available_memory``):

* V0 (<= 0.7 by default): profile one forward pass over ``max_num_batched_tokens``
  dummy tokens split over ``max_num_seqs`` sequences; without chunked prefill that
  budget is ``max(max_model_len, 2048)``, so max_model_len shrinks the pool.
* V1 (default from 0.8): chunked prefill is always on and the budget defaults to
  2048 (serve) / 8192 (offline) tokens, 8192 / 16384 on >= 70 GiB non-A100 boards,
  so the pool no longer depends on max_model_len.
* V1 subtracts the CUDA-graph pool only when ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  is on (added off by default by PR #30515, on by default since v0.21.0) and graphs
  are captured (not ``enforce_eager``); it then subtracts its own estimate. Otherwise
  graphs are captured after the KV pool and paid from the (1 - utilisation) slack.

Peak activation is estimated from shapes, never read from a log: the larger of the
forward intermediates (about 3 x hidden + 3 x FFN width 2-byte values per token,
which reproduces the V0 slope measured on Llama-3.1-8B) and the sampler's dummy run
(max_num_seqs x vocab fp32 logits and their softmax/sort copies, about 6.5 copies).
From vLLM 0.17 the V1 sampler's top-k/top-p runs as a Triton kernel (no sort), and
its share is counted tensor by tensor from the code (``SAMPLER_BYTES_V1_TRITON``);
from 0.14 the fused-MoE workspace stays allocated (``WorkspaceManager``), so it adds
to the sampler's run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from analytics.errors import InvalidInput

GiB = 1024**3

KV_DTYPE_BYTES = {
    "auto": 2.0, "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "int8": 1.0,
}  # fmt: skip

# Bytes per parameter for the body of the network, and for embeddings/lm_head
# (which quantised checkpoints usually keep in 16 bits).
WEIGHT_DTYPES: dict[str, tuple[float, float]] = {
    # vLLM serves float32 weights (--dtype float32): 4 bytes everywhere.
    "fp32": (4.0, 4.0),
    "bf16": (2.0, 2.0),
    "fp16": (2.0, 2.0),
    "fp8": (1.0, 2.0),
    "int8": (1.0, 2.0),
    # 4-bit with one fp16 scale and a 4-bit zero point per group of 128.
    "awq": (0.5 + 20 / 8 / 128, 2.0),
    "gptq": (0.5 + 20 / 8 / 128, 2.0),
    "int4": (0.5 + 20 / 8 / 128, 2.0),
    "bnb4": (0.5 + 0.0625, 2.0),
    # GGUF Q8_0: 34 bytes per block of 32 weights, embeddings included.
    "gguf_q8": (34 / 32, 34 / 32),
}
# vLLM's own ``--dtype`` spellings for the same formats.
WEIGHT_DTYPE_ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def weight_dtype_key(weight_dtype: object) -> str:
    """The catalogue's name for a weight format, in either spelling."""
    key = str(weight_dtype).strip().lower()
    key = WEIGHT_DTYPE_ALIASES.get(key, key)
    if key not in WEIGHT_DTYPES:
        known = sorted(WEIGHT_DTYPES) + sorted(WEIGHT_DTYPE_ALIASES)
        raise InvalidInput("weight_dtype", weight_dtype, f"known: {', '.join(known)}")
    return key


# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (vLLM PR #30515, added off by default)
# is on by default from this version: "CUDA graph memory profiling is enabled
# (default since v0.21.0)" in its start-up log.
CUDAGRAPH_ESTIMATE_DEFAULT_SINCE = (0, 21, 0)

SAMPLER_COPIES = 6.5
# Bytes of the sampler's profiled peak per (sequence x vocab entry), by runner:
# V0 profiles the sampler over max_num_seqs rows (6.5 fp32 copies, set from first
# principles); V1's model runner profiles it with top-k/top-p since PR #13594
# (v0.8.0; issue #13507: before that the sampler was not profiled), and its H100
# logs (llm-d-benchmark config_explorer/empirical-vllm-memory-results.md) show a
# peak activation of 38.4-38.9 bytes per max_num_seqs x vocab entry for four
# models of vocab 128k-201k, i.e. about 9.7 fp32 copies (logits, sort values and
# indices, probabilities); Model Runner V2 profiles a dummy batch with no
# sampling parameters, so only the bf16 logits enter the peak (vLLM PR #57926),
# and from v0.29.0 batch-sharded sampling splits them over TP.
SAMPLER_BYTES_V0 = 4.0 * SAMPLER_COPIES
SAMPLER_BYTES_V1 = 38.7
SAMPLER_BYTES_MRV2 = 2.0
SAMPLER_PROFILED_SINCE = (0, 8, 0)
# vLLM 0.17.0 (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p): batches of 8
# rows or more take apply_top_k_top_p_triton, which masks the fp32 logits in place,
# instead of the PyTorch sort (values, int64 indices and the sort's scratch, the
# bulk of the 38.7 bytes above). _dummy_sampler_run (top_k = vocab - 1, top_p 0.9)
# then holds, per (max_num_seqs x vocab) entry: the bf16 logits from compute_logits
# (2 B), Sampler.forward's float32 copy (4 B), forward_native's softmax probs (4 B)
# and random_sample's exponential q (4 B): 14 bytes. Unchanged in 0.18 and 0.19.
SAMPLER_BYTES_V1_TRITON = 2.0 + 4.0 + 4.0 + 4.0
SAMPLER_TRITON_SINCE = (0, 17, 0)
SAMPLER_TRITON_MIN_ROWS = 8  # `HAS_TRITON and logits.shape[0] >= 8`
# apply_top_k_top_p_triton caches a float32 buffer of min(next_pow2(programs), SMs)
# rows x vocab, programs = min(SMs, batch) (_TRITON_BUFFER_CACHE, kept after the
# run). Streaming multiprocessors by board (NVIDIA datasheets and whitepapers);
# boards not listed count none.
GPU_SM_COUNT = {
    "A100-40GB": 108, "A100-80GB": 108, "H100-SXM": 132, "H100-PCIe": 114,
    "H200": 132, "B200": 148, "L4": 58, "L40S": 142, "A10G": 80, "T4": 40,
    "RTX-3090": 82, "RTX-4090": 128, "RTX-4070-Laptop": 36, "RTX-A6000": 84,
}  # fmt: skip
# Model Runner V2 default: dense models from v0.28.0 (PR #44443), every model from
# v0.29.0 (release notes: "MRV2 is now the default runner for all models").
MRV2_DENSE_SINCE = (0, 28, 0)
MRV2_ALL_SINCE = (0, 29, 0)
ACT_HIDDEN_FACTOR = 3.0
ACT_FFN_FACTOR = 3.0
# Per-GPU non-torch memory the profiler deducts (MemoryProfilingResult
# .non_torch_increase): 0.3 GiB on V0 < 0.7 (vLLM PR #10511's logs), 0.1 GiB later
# at TP 1. Under TP > 1 NCCL channel buffers and the custom all-reduce add to it:
# 0.35 GiB on PCIe boards (V0 logs of 4 x 24 GiB boards print 0.20 GiB in all,
# vLLM PR #14447); on NVLink/NVSwitch boards under V1 the logged totals are 0.55
# (H100 TP 2, 0.11.0, llm-d-benchmark), 0.95 (TP 4, 'CUDA graph pool memory' era
# log), 1.38 (H200 TP 2, 0.10.2) and 1.63 GiB (B300): their median, 1.17 GiB, is
# taken as the total there.
NON_TORCH_OLD_V0 = 0.3 * GiB
NON_TORCH_BASE = 0.1 * GiB
NON_TORCH_TP_PCIE = 0.35 * GiB
NON_TORCH_TP_NVLINK_V1_TOTAL = 1.17 * GiB
NVLINK_BOARDS = ("A100-40GB", "A100-80GB", "H100-SXM", "H200", "B200")
# fused_moe.fused_experts_impl: M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) rows,
# cache13 = M x top_k x max(N, K) and cache2 = M x top_k x N/2 in the activation
# dtype, N = w13 rows per rank (2 x moe_intermediate / TP), K = hidden. The chunk
# default is 32768 (envs.py; 16384 in later releases, above every default budget).
MOE_CHUNK_SIZE = 32768
# From vLLM 0.14.0 the unquantized CUDA MoE runs TritonExperts through
# FusedMoEModularKernel (unquantized_fused_moe_method.py): its buffers come from the
# worker's WorkspaceManager (v1/worker/workspace.py get_simultaneous), which keeps
# them for the engine's life, so they are still held during the sampler's run.
# TritonExperts.workspace_shapes: workspace13 = M x top_k x max(N/2, K) (also holding
# the M x K output), workspace2 = M x top_k x max(N, K).
MOE_PERSISTENT_SINCE = (0, 14, 0)
# FlashInfer allreduce+RMSNorm fusion, on by default at -O2 from vLLM 0.17.0
# (config/vllm.py enable_allreduce_rms_fusion: TP > 1, CUDA capability 9.0 or 10.0,
# flashinfer installed, DP 1, PP 1; off under enforce_eager, which turns
# compilation off). AllReduceFusionPass creates the workspace during the profiled
# compile: max_token_num = min(max size // (hidden x 2), max_num_batched_tokens),
# max size by TP from FI_ALLREDUCE_FUSION_MAX_SIZE_MB
# (compilation/passes/fusion/allreduce_rms_fusion.py). FlashInfer 0.6.4-0.6.6
# trtllm_create_ipc_workspace_for_all_reduce_fusion cudaMallocs (non-torch) three
# IPC buffers, each rounded up to 2 MiB: TP x tokens x hidden x 2 B, the barrier
# flags, and 3 x that (Lamport).
FI_AR_FUSION_SINCE = (0, 17, 0)
FI_AR_FUSION_BOARDS = {"H100-SXM": 90, "H100-PCIe": 90, "H200": 90, "B200": 100}
FI_AR_FUSION_MAX_MB: dict[int, dict[int, float]] = {
    90: {2: 64, 4: 2, 8: 0.5},
    100: {2: 64, 4: 32, 8: 1},
}
# MLA KV entries padded to 256 bytes of the model dtype in V0 (vLLM PR #12676,
# VLLM_CUDA_MEM_ALIGN_KV_CACHE on by default: 640 elements instead of 576, "~11%"),
# removed by PR #14842 before v0.8.0: worker/cache_engine.get_cache_block_size.
MLA_ALIGN_SINCE = (0, 7, 2)
MLA_ALIGN_UNTIL = (0, 8, 0)
MLA_ALIGN_ELEMENTS = 128  # 256 bytes / 2-byte model dtype


@dataclass(frozen=True)
class EngineVersion:
    text: str
    major: int
    minor: int
    patch: int
    generation: str  # "v0" or "v1"

    @property
    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_engine_version(text: str, engine: str | None = None) -> EngineVersion:
    match = _VERSION.match(str(text).strip())
    if not match:
        raise InvalidInput(
            "engine_version", text, "expected a vLLM version like 0.10.1"
        )
    major, minor = int(match.group(1)), int(match.group(2))
    patch = int(match.group(3) or 0)
    default = "v1" if (major, minor) >= (0, 8) else "v0"
    generation = (engine or default).lower()
    if generation not in {"v0", "v1"}:
        raise InvalidInput("engine", engine, "must be 'v0' or 'v1'")
    if generation == "v1" and (major, minor) < (0, 7):
        raise InvalidInput("engine", engine, f"vLLM {text} has no V1 engine")
    if generation == "v0" and (major, minor) >= (0, 11):
        raise InvalidInput("engine", engine, f"vLLM {text} removed the V0 engine")
    return EngineVersion(str(text), major, minor, patch, generation)


def kv_dtype_bytes(kv_dtype: str, version: EngineVersion) -> float:
    key = str(kv_dtype).lower()
    if key not in KV_DTYPE_BYTES:
        raise InvalidInput("kv_dtype", kv_dtype, f"known: {sorted(KV_DTYPE_BYTES)}")
    if key == "int8" and version.tuple < (0, 10, 0):
        raise InvalidInput(
            "kv_dtype",
            kv_dtype,
            f"int8 KV cache is not available in vLLM {version.text}",
        )
    return KV_DTYPE_BYTES[key]


def kv_bytes_per_token(
    layers: np.ndarray | int,
    kv_heads: np.ndarray | int,
    head_dim: np.ndarray | int,
    tp: np.ndarray | int,
    dtype_bytes: np.ndarray | float,
    kv_lora_rank: np.ndarray | int = 0,
    rope_dim: np.ndarray | int = 0,
    mla_aligned: np.ndarray | bool = False,
) -> np.ndarray:
    """Bytes of KV cache one token occupies on one GPU.

    GQA heads are split over TP ranks, but a rank never holds less than one head
    (vLLM replicates KV heads when TP exceeds them). MLA caches one compressed latent
    plus the rope key per layer, replicated on every rank, so TP does not divide it;
    where ``mla_aligned`` (V0 0.7.2-0.7.x) the entry is padded to a multiple of
    128 elements (256 bytes of the 16-bit model dtype), whatever the KV dtype.
    """
    layers = np.asarray(layers, dtype=np.float64)
    heads_per_rank = np.maximum(1, np.asarray(kv_heads) // np.asarray(tp))
    regular = 2 * layers * heads_per_rank * np.asarray(head_dim) * dtype_bytes
    entry = np.asarray(kv_lora_rank) + np.asarray(rope_dim)
    padded = np.ceil(entry / MLA_ALIGN_ELEMENTS) * MLA_ALIGN_ELEMENTS
    entry = np.where(np.asarray(mla_aligned, dtype=bool), padded, entry)
    mla = entry * layers * dtype_bytes
    return np.where(np.asarray(kv_lora_rank) > 0, mla, regular).astype(np.float64)


def weights_bytes(
    params_total: np.ndarray | int,
    embed_params: np.ndarray | int,
    vision_params: np.ndarray | int,
    body_bytes: np.ndarray | float,
    embed_bytes: np.ndarray | float,
    tp: np.ndarray | int,
    unquantized_params: np.ndarray | int = 0,
) -> np.ndarray:
    """Weight bytes resident on one GPU (tensor-parallel shards split evenly).

    ``unquantized_params`` are body parameters a quantised checkpoint keeps in 16
    bits (its ``quantization_config`` names them: ``ignored_layers``,
    ``modules_to_not_convert``); they cost 2 bytes whatever the body dtype.
    """
    params_total = np.asarray(params_total, dtype=np.float64)
    embed = np.asarray(embed_params, dtype=np.float64)
    vision = np.asarray(vision_params, dtype=np.float64)
    kept = np.asarray(unquantized_params, dtype=np.float64)
    body = params_total - embed - vision - kept
    total = body * body_bytes + embed * embed_bytes + vision * 2.0 + kept * 2.0
    return total / np.asarray(tp, dtype=np.float64)


def default_batched_tokens(
    generation_v1: np.ndarray,
    big_board: np.ndarray,
    offline: np.ndarray,
    chunked: np.ndarray,
    max_model_len: np.ndarray,
    old_v0: np.ndarray,
) -> np.ndarray:
    v1 = np.where(
        big_board, np.where(offline, 16384, 8192), np.where(offline, 8192, 2048)
    )
    v0_chunked = np.where(old_v0, 512, 2048)
    v0 = np.where(chunked, v0_chunked, np.maximum(max_model_len, 2048))
    return np.where(generation_v1, v1, v0).astype(np.float64)


def peak_activation_bytes(
    hidden: np.ndarray,
    ffn_width: np.ndarray,
    vocab: np.ndarray,
    tp: np.ndarray,
    batched_tokens: np.ndarray,
    sampled_seqs: np.ndarray,
    dequant_scratch: np.ndarray,
    sampler_bytes_per_logit: np.ndarray | float = SAMPLER_BYTES_V0,
    moe_workspace: np.ndarray | float = 0.0,
    sampler_held: np.ndarray | float = 0.0,
    moe_persistent: np.ndarray | bool = False,
) -> np.ndarray:
    """Profiled torch peak: the larger of the forward pass and the sampler's run.

    Dense layers: about 3 x hidden + 3 x FFN-width/TP two-byte values per token.
    MoE layers: the hidden-state part plus the fused-MoE workspace
    (``moe_workspace_bytes``) instead of the FFN part, where the workspace is given.
    ``sampler_held``: bytes the sampler's run holds beside its logits
    (``sampler_held_bytes``); ``moe_persistent``: the MoE workspace stays allocated
    through the sampler's run (vLLM >= 0.14, ``MOE_PERSISTENT_SINCE``).
    """
    moe = np.asarray(moe_workspace, dtype=np.float64)
    hidden_part = batched_tokens * 2.0 * ACT_HIDDEN_FACTOR * hidden
    ffn_part = batched_tokens * 2.0 * ACT_FFN_FACTOR * ffn_width / tp
    forward = hidden_part + np.where(moe > 0, moe, ffn_part)
    sampler = sampled_seqs * vocab * sampler_bytes_per_logit + sampler_held
    sampler = sampler + np.where(np.asarray(moe_persistent, dtype=bool), moe, 0.0)
    return np.maximum(forward, sampler) + dequant_scratch


def sampler_held_bytes(
    batched_tokens: np.ndarray,
    sampled_seqs: np.ndarray,
    hidden: np.ndarray,
    vocab: np.ndarray,
    sm_count: np.ndarray,
) -> np.ndarray:
    """What V1's profile_run holds while _dummy_sampler_run peaks (vLLM >= 0.17).

    profile_run keeps ``hidden_states`` (max_num_batched_tokens x hidden, bf16) and
    ``last_hidden_states`` (max_num_seqs x hidden) alive; _dummy_sampler_run adds
    ``torch.rand_like`` of the latter; apply_top_k_top_p_triton caches a float32
    buffer of min(next_pow2(min(SMs, seqs)), SMs) x vocab (``GPU_SM_COUNT``).
    """
    seqs = np.asarray(sampled_seqs, dtype=np.float64)
    sms = np.asarray(sm_count, dtype=np.float64)
    programs = np.minimum(sms, seqs)
    pow2 = 2.0 ** np.ceil(np.log2(np.maximum(programs, 1.0)))
    rows = np.where(sms > 0, np.minimum(pow2, sms), 0.0)
    states = 2.0 * hidden * (batched_tokens + 2.0 * seqs)
    return states + rows * vocab * 4.0


def moe_workspace_bytes(
    batched_tokens: np.ndarray,
    top_k: np.ndarray,
    moe_intermediate: np.ndarray,
    hidden: np.ndarray,
    expert_tp: np.ndarray,
    modular: np.ndarray | bool = False,
) -> np.ndarray:
    """The fused-MoE kernel's intermediate caches over one profiled chunk (0 if dense).

    ``expert_tp`` splits each expert's width (TP without expert parallelism, 1
    with it: experts then sit whole on a rank). Before vLLM 0.14
    fused_experts_impl's caches (``M x top_k x (max(N, K) + N/2)``); from 0.14 the
    modular kernel's TritonExperts workspaces (``MOE_PERSISTENT_SINCE``).
    """
    rows = np.minimum(batched_tokens, MOE_CHUNK_SIZE) * np.asarray(top_k)
    n = 2.0 * np.asarray(moe_intermediate) / np.maximum(np.asarray(expert_tp), 1)
    legacy = np.maximum(n, hidden) + n / 2.0
    modular_width = np.maximum(n / 2.0, hidden) + np.maximum(n, hidden)
    width = np.where(np.asarray(modular, dtype=bool), modular_width, legacy)
    workspace = rows * width * 2.0
    return np.where(np.asarray(top_k) > 0, workspace, 0.0)


def fi_allreduce_workspace_bytes(
    max_size: np.ndarray, tp: np.ndarray, hidden: np.ndarray, batched_tokens: np.ndarray
) -> np.ndarray:
    """FlashInfer allreduce-fusion workspace per GPU (``FI_AR_FUSION_*``); 0 where
    ``max_size`` (bytes, by TP and board) is 0."""
    size = np.asarray(max_size, dtype=np.float64)
    tokens = np.minimum(np.floor(size / (hidden * 2.0)), batched_tokens)
    buffer = tp * tokens * hidden * 2.0

    def aligned(n: np.ndarray | float) -> np.ndarray:
        return np.ceil(np.asarray(n) / 2**21) * 2**21

    total = aligned(buffer) + aligned(tp * 256 * 4) + aligned(3.0 * buffer)
    return np.where(size > 0, total, 0.0)


def non_torch_bytes(
    old_v0: np.ndarray,
    tp: np.ndarray,
    nvlink_v1: np.ndarray | bool = False,
    fi_workspace: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Per-GPU non-torch memory the profiler deducts (see NON_TORCH_* above), plus
    the FlashInfer allreduce-fusion workspace where it is created."""
    base = np.where(old_v0, NON_TORCH_OLD_V0, NON_TORCH_BASE)
    tp_extra = np.where(
        np.asarray(nvlink_v1, dtype=bool),
        NON_TORCH_TP_NVLINK_V1_TOTAL - NON_TORCH_BASE,
        NON_TORCH_TP_PCIE,
    )
    return base + np.where(tp > 1, tp_extra, 0.0) + fi_workspace


def activation_and_non_torch(
    c: dict[str, np.ndarray],
    mbt: np.ndarray,
    max_num_seqs: np.ndarray,
    old_v0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The profiled torch peak and the non-torch increase, per scenario, from the
    resolved columns (analytics/capacity/resolve.py) and the engine's defaults."""
    tp = c["tp"]
    sampled = np.minimum(max_num_seqs, mbt)
    runner1_triton = c["sampler_triton"] > 0
    triton = runner1_triton & (sampled >= SAMPLER_TRITON_MIN_ROWS)
    # Fewer than 8 rows still take the PyTorch sort in 0.17+.
    sampler_bytes = np.where(
        runner1_triton & ~triton, SAMPLER_BYTES_V1, c["sampler_bytes"]
    )
    held = sampler_held_bytes(mbt, sampled, c["hidden"], c["vocab"], c["sm_count"])
    persistent = c["moe_persistent"] > 0
    moe_ws = moe_workspace_bytes(
        mbt, c["top_k"], c["moe_intermediate"], c["hidden"], c["expert_tp"], persistent
    )
    activation = peak_activation_bytes(
        c["hidden"], c["ffn_width"], c["vocab"], tp, mbt, sampled,
        c["dequant_scratch"], sampler_bytes, moe_ws,
        np.where(triton, held, 0.0), persistent,
    )  # fmt: skip
    # enforce_eager turns compilation off, so the fusion pass never runs.
    fi_size = np.where(c["enforce_eager"], 0.0, c["fi_ar_max_bytes"])
    fi = fi_allreduce_workspace_bytes(fi_size, tp, c["hidden"], mbt)
    non_torch = non_torch_bytes(old_v0, tp, c["nvlink_v1"] > 0, fi)
    return activation, non_torch


def cuda_graph_bytes(layers: np.ndarray, counted: np.ndarray) -> np.ndarray:
    return np.where(counted, 0.3 * GiB + layers * 0.006 * GiB, 0.0)


def blocks_from_memory(
    kv_memory: np.ndarray, block_size: np.ndarray, bytes_per_token: np.ndarray
) -> np.ndarray:
    blocks = np.floor(np.maximum(kv_memory, 0.0) / (block_size * bytes_per_token))
    return blocks.astype(np.int64)


def concurrency_for_shape(
    blocks: np.ndarray,
    block_size: np.ndarray,
    tokens_per_request: np.ndarray,
    max_num_seqs: np.ndarray,
) -> np.ndarray:
    """Requests of one shape that fit at once: blocks each needs, capped by max_num_seqs."""
    per_request = np.ceil(tokens_per_request / block_size)
    return np.minimum(max_num_seqs, blocks / np.maximum(per_request, 1.0))


def largest_len_fitting(
    pool_tokens: np.ndarray, window: np.ndarray, swa_share: np.ndarray
) -> np.ndarray:
    """Longest sequence whose KV fits the pool (vLLM's estimated max model length).

    Full-attention layers need the whole length, sliding-window ones at most
    ``window`` tokens, so the pool's token count inverts ``pool_tokens_for``.
    """
    full = 1.0 - swa_share
    with np.errstate(divide="ignore", invalid="ignore"):
        longer = (pool_tokens - window * swa_share) / full
    longer = np.where(full > 0, longer, np.inf)
    return np.where(longer >= window, longer, pool_tokens).astype(np.float64)
