"""Calibration: records (``calibration_io``) and fits/importers (``calibration_fit``).

This module keeps the names callers import; the code lives in the two halves.
"""

from __future__ import annotations

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
    calibration_from_dict,
    calibration_to_dict,
    load_calibration,
)

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
