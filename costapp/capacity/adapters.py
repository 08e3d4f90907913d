"""Glue between what costapp stores and what the pure capacity engine takes.

Names differ on the two sides (a deployment says ``meta-llama/Llama-3.1-8B-Instruct``,
the catalogue says ``Llama-3.1-8B``; the ``Calibration`` table says
``engine_bench``, the engine says ``engine_measurements``); this module is the one
place that maps them, using only the engine's public functions.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from analytics.capacity.calibration import calibration_from_dict
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
)
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.catalog import get_gpu, get_model, gpus, models
from analytics.capacity.engine import Scenario
from analytics.errors import InvalidInput
from costapp.models import Calibration, Deployment

logger = logging.getLogger(__name__)

DEFAULT_ENGINE_VERSION = "0.10.1"
# A calibration file larger than this is refused by the upload form before the
# service reads it, and by the service for the command line.
MAX_CALIBRATION_BYTES = 5 * 1024 * 1024

# The engine's vocabulary for KV-cache dtypes and weight formats.
KV_DTYPES = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")
WEIGHT_DTYPES = (
    "bf16",
    "fp32",
    "fp16",
    "fp8",
    "int8",
    "awq",
    "gptq",
    "int4",
    "bnb4",
    "gguf_q8",
)

# Table kind -> engine kind; the table keeps where the numbers came from, the
# engine only needs to know engine measurements from hardware constants.
ENGINE_KIND = {
    "engine_bench": ENGINE_MEASUREMENTS,
    "telemetry_fit": ENGINE_MEASUREMENTS,
    "hardware_constants": HARDWARE_CONSTANTS,
}

SCENARIO_FIELDS = tuple(f.name for f in fields(Scenario))
# What vLLM's memory profile depends on: a change to any of these means the
# running engine's reported pool (``num_gpu_blocks_override`` on "today") no
# longer applies and the memory model sizes the pool. max_model_len is not
# among them: V1 profiles with max_num_batched_tokens, not the model length.
POOL_INPUTS = frozenset({
    "model", "gpu", "mig_profile", "tp", "weight_dtype", "kv_dtype", "engine_version",
    "engine", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
    "block_size", "enforce_eager", "data_parallel_size", "enable_expert_parallel",
    "estimate_cudagraphs", "model_runner_v2", "kv_cache_memory_bytes",
})  # fmt: skip


def catalogue_models() -> list[str]:
    return sorted(models())


def catalogue_gpus() -> list[str]:
    return list(gpus())


def fleet_mig_gpu(choices: Iterable[str]) -> str | None:
    """The GPU the fleet's MIG deployments run on (the most of them), among
    ``choices``: the MIG page starts from it rather than any one default."""
    running = Counter(
        Deployment.objects.exclude(mig_profile="").values_list("gpu_type", flat=True)
    )
    offered = set(choices)
    return next((gpu for gpu, _ in running.most_common() if gpu in offered), None)


def mig_profiles_of(gpu: str) -> list[str]:
    try:
        return [p.name for p in get_gpu(gpu).mig_profiles]
    except InvalidInput:
        return []


def mig_slices_of(gpu: str) -> int | None:
    """Compute slices a whole GPU has (7; an A30 4), from its own profiles."""
    try:
        return get_gpu(gpu).mig_slices
    except InvalidInput:
        return None


def gpu_memory_bytes(gpu: str, mig_profile: str | None) -> float | None:
    """Device (or MIG instance) memory the engine sizes against."""
    try:
        spec = get_gpu(gpu)
        if mig_profile:
            return float(spec.mig_profile(mig_profile).usable_memory_bytes)
        return float(spec.memory_bytes)
    except InvalidInput:
        return None


def catalogue_model_name(model_name: str) -> str:
    """The catalogue entry a served model name refers to.

    Served names carry an organisation and suffixes (``-Instruct``, ``-FP8``,
    ``Meta-``); the longest run of the name's hyphen-separated parts that the
    catalogue knows wins, so ``Qwen3-30B-A3B-Instruct-2507`` maps to
    ``Qwen3-30B-A3B`` rather than to a shorter accidental match.
    """
    base = model_name.strip().rsplit("/", 1)[-1]
    try:
        return get_model(base).name
    except InvalidInput:
        pass
    parts = base.split("-")
    for length in range(len(parts) - 1, 0, -1):
        for start in range(0, len(parts) - length + 1):
            candidate = "-".join(parts[start : start + length])
            try:
                return get_model(candidate).name
            except InvalidInput:
                continue
    raise InvalidInput(
        "model",
        model_name,
        "not in the capacity catalogue (pick the closest catalogue model)",
    )


def effective_max_model_len(scenario: Scenario) -> int | None:
    """The max_model_len vLLM runs ``scenario`` with: the one set, else the
    model's derived maximum (4,096 where the config gives none, as the engine)."""
    if scenario.max_model_len:
        return int(scenario.max_model_len)
    model = scenario.model
    try:
        spec = get_model(model) if isinstance(model, str) else model
    except InvalidInput:
        return None
    derived = int(getattr(spec, "max_position", 0) or 0)
    return derived if derived > 0 else 4096


def weight_dtype_from_name(model_name: str) -> str | None:
    """Quantisation a checkpoint name announces, if any (``-FP8``, ``-AWQ``)."""
    lowered = model_name.lower()
    for marker, dtype in (
        ("fp8", "fp8"),
        ("awq", "awq"),
        ("gptq", "gptq"),
        ("int8", "int8"),
        ("w8a8", "int8"),
        ("int4", "int4"),
        ("bnb", "bnb4"),
        ("gguf", "gguf_q8"),
    ):
        if marker in lowered:
            return dtype
    return None


def scenario_with(base: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """``base`` with the given fields replaced; unknown fields are refused."""
    unknown = sorted(set(overrides) - set(SCENARIO_FIELDS))
    if unknown:
        raise InvalidInput(unknown[0], overrides[unknown[0]], "not a scenario field")
    values = {name: getattr(base, name) for name in SCENARIO_FIELDS}
    values.update(overrides)
    return Scenario(**values)


def scenario_changed(base: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """``base`` with ``overrides``, keeping the engine's reported pool only
    while nothing it was profiled with changes (``POOL_INPUTS``)."""
    changes = dict(overrides)
    if base.num_gpu_blocks_override is not None and any(
        key in POOL_INPUTS and value != getattr(base, key)
        for key, value in changes.items()
    ):
        changes.setdefault("num_gpu_blocks_override", None)
    return scenario_with(base, changes)


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in SCENARIO_FIELDS:
        value = getattr(scenario, name)
        if hasattr(value, "name") and not isinstance(value, str):
            value = value.name  # a ModelSpec
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[name] = value
    return out


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    return scenario_with(
        Scenario(model=str(data["model"]), gpu=str(data["gpu"])),
        {k: v for k, v in data.items() if k not in ("model", "gpu")},
    )


def engine_calibration(row: Calibration) -> EngineCalibration:
    """The engine's calibration record for one stored row (re-validated)."""
    return calibration_from_dict(row.payload)


def engine_calibrations(rows: Iterable[Calibration]) -> list[EngineCalibration]:
    """Every stored calibration the engine accepts; a row that no longer
    validates (schema moved on) is skipped and logged, never fatal to a page."""
    out = []
    for row in rows:
        try:
            out.append(engine_calibration(row))
        except InvalidInput as exc:
            logger.warning("calibration %s skipped: %s", row.pk, exc)
    return out
