"""Model and GPU catalogue: frozen specs read from the JSON files in ``data/``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from analytics.errors import InvalidInput


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    params_total: int
    params_active: int
    hf_config: str = ""
    tie_embeddings: bool = False
    max_position: int = 0
    # MoE: experts per layer, chosen per token, and each expert's FFN width.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    first_dense_layers: int = 0
    # MLA (DeepSeek-V2/V3): the cache holds one latent + one rope key per layer.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    # Sliding-window attention: how many layers only keep the last `window` tokens.
    sliding_window: int = 0
    sliding_window_layers: int = 0
    vision_params: int = 0
    # Body parameters a quantised checkpoint keeps in 16 bits (quantization_config).
    unquantized_params: int = 0
    # Served names with the same architecture (fine-tunes: Coder, Guard, ...).
    aliases: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def expert_params_total(self) -> int:
        """Parameters in routed experts over all MoE layers (0 for dense)."""
        if not self.is_moe:
            return 0
        moe_layers = self.layers - self.first_dense_layers
        return 3 * self.hidden * self.moe_intermediate * self.num_experts * moe_layers

    @property
    def dense_params(self) -> int:
        """Parameters every token reads whatever the routing (all but routed experts)."""
        return self.params_total - self.expert_params_total


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    usable_memory_bytes: int
    starts: tuple[int, ...]
    verified: bool = False


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_per_s: float
    peak_bf16_flops: float
    peak_fp8_flops: float | None
    source: str = ""
    memory_verified: bool = True
    mig_family: str | None = None
    mig_profiles: tuple[MigProfile, ...] = field(default_factory=tuple)
    aliases: tuple[str, ...] = ()

    @property
    def mig_slices(self) -> int:
        """Compute slices of the whole GPU: its largest MIG profile (7 on A100,
        H100 and H200, 4 on A30); 7 for a GPU without MIG, where it is unused."""
        return max((p.compute_slices for p in self.mig_profiles), default=7)

    def mig_profile(self, name: str) -> MigProfile:
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.mig_profiles) or "none"
        raise InvalidInput(
            "mig_profile", name, f"not a MIG profile of {self.name} (known: {known})"
        )


def _read_json(filename: str) -> Any:
    text = (
        resources.files("analytics.capacity")
        .joinpath("data")
        .joinpath(filename)
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


_MODEL_KEYS = {
    "name", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab",
    "intermediate", "params_total", "params_active", "hf_config", "tie_embeddings",
    "max_position", "num_experts", "experts_per_token", "moe_intermediate",
    "shared_experts", "first_dense_layers", "kv_lora_rank", "qk_rope_head_dim",
    "sliding_window", "sliding_window_layers", "vision_params", "aliases",
    "unquantized_params",
}  # fmt: skip


def model_from_dict(data: Mapping[str, Any]) -> ModelSpec:
    kwargs = {k: v for k, v in data.items() if k in _MODEL_KEYS}
    kwargs.setdefault("params_active", kwargs.get("params_total", 0))
    kwargs["aliases"] = tuple(kwargs.get("aliases", ()))
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
        value = kwargs.get(key)
        if not isinstance(value, int) or value <= 0:
            raise InvalidInput(f"model.{key}", value, "must be a positive integer")
    return ModelSpec(**kwargs)


@lru_cache(maxsize=1)
def models() -> dict[str, ModelSpec]:
    return {m["name"]: model_from_dict(m) for m in _read_json("models.json")["models"]}


@lru_cache(maxsize=1)
def gpus() -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    for g in _read_json("gpus.json")["gpus"]:
        mig = g.get("mig") or {}
        profiles = tuple(
            MigProfile(
                name=p["name"],
                compute_slices=p["compute_slices"],
                memory_slices=p["memory_slices"],
                usable_memory_bytes=p["usable_memory_bytes"],
                starts=tuple(p["starts"]),
                verified=bool(p.get("verified", False)),
            )
            for p in mig.get("profiles", [])
        )
        out[g["name"]] = GpuSpec(
            name=g["name"],
            memory_bytes=g["memory_bytes"],
            hbm_bandwidth_bytes_per_s=g["hbm_bandwidth_bytes_per_s"],
            peak_bf16_flops=g["peak_bf16_flops"],
            peak_fp8_flops=g.get("peak_fp8_flops"),
            source=g.get("source", ""),
            memory_verified=bool(g.get("memory_verified", True)),
            mig_family=mig.get("family"),
            mig_profiles=profiles,
            aliases=tuple(g.get("aliases", [])),
        )
    return out


@lru_cache(maxsize=1)
def _models_by_lowercase_name() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for spec in models().values():
        for name in (spec.name, *spec.aliases):
            out[name.lower()] = spec
    return out


def get_model(name: str) -> ModelSpec:
    found = models().get(name)
    if found is None:
        found = _models_by_lowercase_name().get(name.lower())
    if found is None:
        raise InvalidInput("model", name, f"unknown model; known: {sorted(models())}")
    return found


def get_gpu(name: str) -> GpuSpec:
    for gpu in gpus().values():
        if (
            name == gpu.name
            or name.lower() in {a.lower() for a in gpu.aliases}
            or (name.lower() == gpu.name.lower())
        ):
            return gpu
    raise InvalidInput("gpu", name, f"unknown GPU; known: {sorted(gpus())}")


def model_from_hf_config(config: Mapping[str, Any], *, name: str = "") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (already parsed).

    Parameter counts are not in config.json, so they are computed from the shapes
    (attention, gated MLP or MoE experts, embeddings), which matches the released
    checkpoints of Llama/Qwen/Mistral-style models to within a fraction of a percent.
    """
    cfg = dict(config)
    if "text_config" in config and "num_hidden_layers" not in config:
        # Multimodal configs (Qwen2-VL, Gemma-3) keep the language model apart.
        cfg = {**config, **dict(config["text_config"])}

    def need(*keys: str) -> int:
        for key in keys:
            if key in cfg and cfg[key] is not None:
                value = cfg[key]
                if not isinstance(value, int) or value <= 0:
                    raise InvalidInput(f"config.{key}", value, "must be a positive int")
                return value
        raise InvalidInput(f"config.{keys[0]}", None, "missing from config.json")

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv_heads = int(
        cfg.get("num_key_value_heads") or cfg.get("multi_query_group_num") or heads
    )
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = need("vocab_size")
    intermediate = int(cfg.get("intermediate_size") or cfg.get("ffn_dim") or 4 * hidden)
    tie = bool(cfg.get("tie_word_embeddings", False))
    num_experts = int(
        cfg.get("num_experts")
        or cfg.get("num_local_experts")
        or cfg.get("n_routed_experts")
        or 0
    )
    top_k = int(cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or 0)
    moe_inter = int(
        cfg.get("moe_intermediate_size") or (intermediate if num_experts else 0)
    )
    shared = int(cfg.get("n_shared_experts") or 0)
    first_dense = int(cfg.get("first_k_dense_replace") or 0)
    kv_lora = int(cfg.get("kv_lora_rank") or 0)
    rope_dim = int(cfg.get("qk_rope_head_dim") or 0)
    window = cfg.get("sliding_window")
    window_layers = 0
    if window:
        layer_types = cfg.get("layer_types")
        if isinstance(layer_types, list):
            window_layers = sum(1 for t in layer_types if t == "sliding_attention")
        elif "gemma2" in str(cfg.get("model_type", "")):
            window_layers = layers // 2
        elif cfg.get("model_type") in {"mistral", "mixtral"}:
            window_layers = layers
        if str(cfg.get("model_type", "")).startswith("qwen") and not cfg.get(
            "use_sliding_window", False
        ):
            # Qwen configs carry a sliding_window value but leave it switched off.
            window_layers = 0
    if not window_layers:
        window = 0

    if kv_lora:
        q_lora = int(cfg.get("q_lora_rank") or 0)
        nope = int(cfg.get("qk_nope_head_dim") or 128)
        v_dim = int(cfg.get("v_head_dim") or 128)
        q_dim = heads * (nope + rope_dim)
        q_params = hidden * q_lora + q_lora * q_dim if q_lora else hidden * q_dim
        attn = (
            q_params
            + hidden * (kv_lora + rope_dim)
            + kv_lora * heads * (nope + v_dim)
            + heads * v_dim * hidden
        )
        head_dim = nope + rope_dim
    else:
        attn = (
            hidden * heads * head_dim
            + 2 * hidden * kv_heads * head_dim
            + (heads * head_dim * hidden)
        )
    dense_mlp = 3 * hidden * intermediate
    if num_experts:
        moe_layers = layers - first_dense
        per_moe_layer = (
            3 * hidden * moe_inter * (num_experts + shared) + hidden * num_experts
        )
        mlp_total = first_dense * dense_mlp + moe_layers * per_moe_layer
        mlp_active = first_dense * dense_mlp + moe_layers * (
            3 * hidden * moe_inter * (top_k + shared) + hidden * num_experts
        )
    else:
        mlp_total = mlp_active = layers * dense_mlp
    embed = vocab * hidden * (1 if tie else 2)
    norms = layers * 2 * hidden + hidden
    total = layers * attn + mlp_total + embed + norms
    active = layers * attn + mlp_active + embed + norms
    if kv_lora:
        attn_modules = {"self_attn": attn}
    else:
        attn_modules = {
            "self_attn.q_proj": hidden * heads * head_dim,
            "self_attn.k_proj": hidden * kv_heads * head_dim,
            "self_attn.v_proj": hidden * kv_heads * head_dim,
            "self_attn.o_proj": heads * head_dim * hidden,
        }
    unquantized = _unquantized_params(
        cfg.get("quantization_config"),
        layers=layers,
        attn_modules=attn_modules,
        dense_layers=first_dense if num_experts else layers,
        mlp_module=hidden * intermediate,
        moe_modules={
            "mlp.gate": hidden * num_experts,
            "mlp.experts": 3 * hidden * moe_inter * num_experts,
            "mlp.shared_experts": 3 * hidden * moe_inter * shared,
        }
        if num_experts
        else {},
    )
    return ModelSpec(
        name=name
        or str(cfg.get("_name_or_path") or cfg.get("model_type") or "hf-model"),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=intermediate,
        params_total=int(total),
        params_active=int(active),
        hf_config="config.json (imported)",
        tie_embeddings=tie,
        max_position=_derived_max_len(cfg),
        unquantized_params=unquantized,
        num_experts=num_experts,
        experts_per_token=top_k,
        moe_intermediate=moe_inter,
        shared_experts=shared,
        first_dense_layers=first_dense,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim,
        sliding_window=int(window or 0),
        sliding_window_layers=window_layers,
    )


def _derived_max_len(cfg: Mapping[str, Any]) -> int:
    """vLLM's derived max_model_len (config.py ``_get_and_verify_max_len``).

    The position limit, scaled by ``rope_scaling.factor`` except for the rope
    types whose limit already includes it (su, longrope, llama3); YaRN scales the
    original limit.
    """
    derived = int(cfg.get("max_position_embeddings") or 0)
    rope = cfg.get("rope_scaling")
    if derived and isinstance(rope, Mapping):
        kind = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rope.get("factor")
        if kind not in {"su", "longrope", "llama3", "default"} and isinstance(
            factor, int | float
        ):
            if kind == "yarn" and rope.get("original_max_position_embeddings"):
                derived = int(rope["original_max_position_embeddings"])
            derived = int(derived * float(factor))
    return derived


def _matches(name: str, patterns: list[str], *, substring: bool) -> bool:
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.fullmatch(pattern[3:], name) or re.match(pattern[3:], name):
                return True
        elif name == pattern or name.startswith(pattern + "."):
            return True
        elif substring and pattern in name:
            return True
    return False


def _unquantized_params(
    qcfg: Any,
    *,
    layers: int,
    attn_modules: Mapping[str, int],
    dense_layers: int,
    mlp_module: int,
    moe_modules: Mapping[str, int],
) -> int:
    """Body parameters a quantised checkpoint keeps in 16 bits.

    FP8 and compressed-tensors checkpoints list them in ``ignored_layers`` /
    ``ignore`` (full names or ``re:`` patterns, as vLLM's ``is_layer_skipped``
    reads them); bitsandbytes/AWQ in ``modules_to_not_convert`` (matched as
    substrings, as transformers does). Embeddings and lm_head are counted as 16-bit
    already, so they are not counted here.
    """
    if not isinstance(qcfg, Mapping):
        return 0
    exact = [str(p) for p in (qcfg.get("ignored_layers") or qcfg.get("ignore") or [])]
    loose = [str(p) for p in (qcfg.get("modules_to_not_convert") or [])]
    if not exact and not loose:
        return 0
    kept = 0
    for i in range(layers):
        modules = dict(attn_modules)
        if i < dense_layers:
            modules.update(
                {
                    "mlp.gate_proj": mlp_module,
                    "mlp.up_proj": mlp_module,
                    "mlp.down_proj": mlp_module,
                }
            )
        else:
            modules.update(moe_modules)
        for module, params in modules.items():
            name = f"model.layers.{i}.{module}"
            if _matches(name, exact, substring=False) or _matches(
                name, loose, substring=True
            ):
                kept += params
    return kept
