"""Calibration: records (``calibration_io``) and fits/importers (``calibration_fit``).

This module keeps the names callers import, and picks the reader for a
document's kind, so that neither half imports the other back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analytics.capacity.calibration_fit import (
    fit_decode,
    fit_errors,
    fit_from_telemetry,
    hardware_constants_from_harness,
    import_vllm_bench_latency,
    import_vllm_bench_serve,
)
from analytics.capacity.calibration_io import (
    SCHEMA_VERSION,
    SUPPORTED_SCHEMA_VERSIONS,
    CalibrationRefused,
    calibration_json,
    calibration_kind,
    calibration_to_dict,
    engine_measurements_from_dict,
)
from analytics.capacity.calibration_types import HARDWARE_CONSTANTS, Calibration

__all__ = [
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMA_VERSIONS",
    "CalibrationRefused",
    "calibration_from_dict",
    "calibration_to_dict",
    "fit_decode",
    "fit_errors",
    "fit_from_telemetry",
    "hardware_constants_from_harness",
    "import_vllm_bench_latency",
    "import_vllm_bench_serve",
    "load_calibration",
]


def calibration_from_dict(data: Mapping[str, Any]) -> Calibration:
    """Validate a calibration document of either kind; refuses with the field
    path and value."""
    if calibration_kind(data) == HARDWARE_CONSTANTS:
        return hardware_constants_from_harness(data)
    return engine_measurements_from_dict(data)


def load_calibration(path: str | Path) -> Calibration:
    """Read and validate one calibration file (either kind)."""
    return calibration_from_dict(
        calibration_json(Path(path).read_text(encoding="utf-8"), name=str(path))
    )
