"""Calibration records: versioned JSON in and out, validated field by field."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
    Calibration,
    CalibrationKey,
    FitQuality,
)
from analytics.capacity.catalog import get_gpu, get_model
from analytics.capacity.errors import InvalidInput
from analytics.capacity.latency import LatencyParams

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = {1}


class CalibrationRefused(InvalidInput):
    """The data cannot support a fit (too few points, too flat)."""


# ---------------------------------------------------------------------------
# Validation helpers: every message names the field path and the value
# ---------------------------------------------------------------------------


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise InvalidInput(path, None, "missing")
        node = node[part]
    return node


def _positive(data: Mapping[str, Any], path: str, *, allow_zero: bool = False) -> float:
    value = _get(data, path)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if (
        ok
        and math.isfinite(float(value))
        and (value > 0 or (allow_zero and value == 0))
    ):
        return float(value)
    limit = ">= 0" if allow_zero else "> 0"
    raise InvalidInput(path, value, f"must be a finite number {limit}")


def _optional_text(data: Mapping[str, Any], path: str) -> str | None:
    try:
        value = _get(data, path)
    except InvalidInput:
        return None
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInput(path, value, "must be a non-empty string or null")
    return value


def _key_from(data: Mapping[str, Any], prefix: str = "key") -> CalibrationKey:
    gpu = _get(data, f"{prefix}.gpu")
    if not isinstance(gpu, str) or not gpu:
        raise InvalidInput(f"{prefix}.gpu", gpu, "must name a GPU")
    get_gpu(gpu)  # raises naming the value when unknown
    tp_value: Any
    try:
        tp_value = _get(data, f"{prefix}.tp")
    except InvalidInput:
        tp_value = None
    if tp_value is not None and (not isinstance(tp_value, int) or tp_value < 1):
        raise InvalidInput(f"{prefix}.tp", tp_value, "must be a positive integer")
    return CalibrationKey(
        gpu=gpu,
        model=_optional_text(data, f"{prefix}.model"),
        weight_dtype=_optional_text(data, f"{prefix}.weight_dtype"),
        kv_dtype=_optional_text(data, f"{prefix}.kv_dtype"),
        tp=tp_value,
        engine_version=_optional_text(data, f"{prefix}.engine_version"),
        mig_profile=_optional_text(data, f"{prefix}.mig_profile"),
    )


def calibration_from_dict(data: Mapping[str, Any]) -> Calibration:
    """Validate a calibration document; refuses with the field path and value."""
    if not isinstance(data, Mapping):
        raise InvalidInput("<document>", type(data).__name__, "must be a JSON object")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InvalidInput(
            "schema_version", version, f"supported: {sorted(SUPPORTED_SCHEMA_VERSIONS)}"
        )
    kind = data.get("kind")
    if kind == HARDWARE_CONSTANTS:
        # The harness document carries its own fit (attention grid), so its reader
        # lives with the fits; imported here because calibration_fit imports us.
        from analytics.capacity.calibration_fit import hardware_constants_from_harness

        return hardware_constants_from_harness(data)
    if kind != ENGINE_MEASUREMENTS:
        raise InvalidInput(
            "kind", kind, f"must be '{ENGINE_MEASUREMENTS}' or '{HARDWARE_CONSTANTS}'"
        )
    key = _key_from(data)
    if key.model is None:
        raise InvalidInput("key.model", None, "engine measurements need the model")
    get_model(key.model)
    params = LatencyParams(
        t0_s=_positive(data, "params.t0_s", allow_zero=True),
        bw_eff_bytes_per_s=_positive(data, "params.bw_eff_bytes_per_s"),
        decode_flops_eff=_positive(data, "params.decode_flops_eff"),
        prefill_flops_eff=_positive(data, "params.prefill_flops_eff"),
        p0_s=_positive(data, "params.p0_s", allow_zero=True),
        itl_percentile_factor=_positive(data, "params.itl_percentile_factor")
        if "itl_percentile_factor" in data.get("params", {})
        else 1.0,
        stall_fraction=_positive(data, "params.stall_fraction", allow_zero=True)
        if "stall_fraction" in data.get("params", {})
        else 1.0,
    )
    n_points = _get(data, "fit.n_points")
    if not isinstance(n_points, int) or n_points < 1:
        raise InvalidInput("fit.n_points", n_points, "must be a positive integer")
    fit = FitQuality(
        n_points=n_points,
        mape=_optional_number(data, "fit.mape"),
        r2=_optional_number(data, "fit.r2"),
        method=str(data.get("fit", {}).get("method", "unknown")),
    )
    points = data.get("points", [])
    if not isinstance(points, list):
        raise InvalidInput("points", points, "must be a list")
    return Calibration(
        kind=ENGINE_MEASUREMENTS,
        key=key,
        params=params,
        fit=fit,
        source=str(data.get("source", "")),
        schema_version=int(version),
        points=tuple(dict(p) for p in points),
    )


def _optional_number(data: Mapping[str, Any], path: str) -> float | None:
    try:
        value = _get(data, path)
    except InvalidInput:
        return None
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(float(value))
    ):
        raise InvalidInput(path, value, "must be a finite number or null")
    return float(value)


def calibration_to_dict(cal: Calibration) -> dict[str, Any]:
    params = asdict(cal.params)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": cal.kind,
        "key": asdict(cal.key),
        "params": {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in params.items()
        },
        "fit": cal.fit.as_dict(),
        "source": cal.source,
        "points": list(cal.points),
    }


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate one calibration file (either kind)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInput("<file>", str(path), f"not valid JSON: {exc.msg}") from exc
    return calibration_from_dict(data)
