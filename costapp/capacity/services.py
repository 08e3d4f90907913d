"""Writes of the capacity area: saved scenarios and calibration imports."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction

from analytics.capacity.calibration import (
    calibration_from_dict,
    calibration_to_dict,
    import_vllm_bench_latency,
    import_vllm_bench_serve,
)
from analytics.capacity.calibration_io import MAX_TP, calibration_json
from analytics.capacity.calibration_types import (
    HARDWARE_CONSTANTS,
    CalibrationKey,
)
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.errors import CapacityError
from analytics.capacity.memory import weight_dtype_key
from analytics.errors import InvalidInput
from costapp.capacity import adapters
from costapp.capacity.backtest import WINDOW_DAYS, telemetry_fit
from costapp.capacity.tables import METRICS, Cell, whatif_table
from costapp.capacity.whatif import Column, WhatIf
from costapp.csv_export import csv_text
from costapp.models import Calibration, Deployment, Scenario
from costapp.validation import int_in

# What ``vllm bench latency`` was run with (its file does not say): the upload
# form's bounds, for the command line too.
BENCH_LATENCY_SHAPE = {
    "batch_size": 65_536,
    "input_len": 10_000_000,
    "output_len": 1_000_000,
}


# The calibration key's parts and the columns that store them.
KEY_COLUMNS = {
    "gpu": "gpu_type",
    "mig_profile": "mig_profile",
    "model": "model_name",
    "weight_dtype": "weight_dtype",
    "kv_dtype": "kv_dtype",
    "engine_version": "engine_version",
}


def _json_clean(value: Any) -> Any:
    """NaN and infinity are not JSON (PostgreSQL refuses them): store null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_clean(value.item())
    return value


def _detect(document: Any) -> str:
    if isinstance(document, Mapping):
        if "schema_version" in document or "kind" in document:
            return "calibration"
        if "avg_latency" in document:
            return "bench_latency"
        if "completed" in document or "output_throughput" in document:
            return "bench_serve"
    if (
        isinstance(document, list)
        and document
        and all(isinstance(d, Mapping) and "completed" in d for d in document)
    ):
        return "bench_serve"
    keys = (
        sorted(document)[:8]
        if isinstance(document, Mapping)
        else type(document).__name__
    )
    raise InvalidInput(
        "<document>",
        keys,
        "not a calibration file nor a vllm bench serve/latency result",
    )


def _key(target: Mapping[str, Any]) -> CalibrationKey:
    gpu = target.get("gpu")
    if not gpu:
        raise InvalidInput("gpu", gpu, "a bench result needs the target GPU")
    model = target.get("model")
    if not model:
        raise InvalidInput("model", model, "a bench result needs the model")
    weight_dtype = weight_dtype_key(target.get("weight_dtype") or "bf16")
    return CalibrationKey(
        gpu=str(gpu),
        model=str(model),
        weight_dtype=weight_dtype,
        kv_dtype=target.get("kv_dtype") or "auto",
        tp=int_in(target.get("tp") or 1, field="tp", minimum=1, maximum=MAX_TP),
        engine_version=target.get("engine_version") or adapters.DEFAULT_ENGINE_VERSION,
        mig_profile=target.get("mig_profile") or None,
    )


def _table_kind(cal: EngineCalibration) -> str:
    if cal.kind == HARDWARE_CONSTANTS:
        return "hardware_constants"
    return "telemetry_fit" if cal.source == "telemetry" else "engine_bench"


def calibration_import(
    *,
    content: bytes | str,
    filename: str = "",
    target: Mapping[str, Any] | None = None,
) -> Calibration:
    """Validate a calibration file or a ``vllm bench`` result and store it.

    Everything is validated (by the engine's own validator) before the one row
    is written, so a refused file leaves the table as it was.
    """
    target = dict(target or {})
    if len(content) > adapters.MAX_CALIBRATION_BYTES:
        raise InvalidInput("file", filename, "larger than 5 MiB")
    try:
        text = content.decode("utf-8") if isinstance(content, bytes) else content
    except UnicodeDecodeError as exc:
        raise InvalidInput("file", filename, "not UTF-8 text") from exc
    try:
        # Numbers bounded in digits before any conversion, at most 20 deep.
        document = calibration_json(text)
    except InvalidInput as exc:
        if exc.field != "<file>":
            raise
        raise InvalidInput("file", filename, exc.reason) from exc
    kind = _detect(document)
    if kind == "calibration":
        cal = calibration_from_dict(document)
        # The harness document is what the loader reads back; keep it as is.
        payload = (
            dict(document)
            if cal.kind == HARDWARE_CONSTANTS
            else calibration_to_dict(cal)
        )
    elif kind == "bench_serve":
        cal = import_vllm_bench_serve(
            document, key=_key(target), source=filename or "vllm bench serve"
        )
        payload = calibration_to_dict(cal)
    else:
        shape: dict[str, int] = {}
        for name, most in BENCH_LATENCY_SHAPE.items():
            value = target.get(name)
            if not value:
                raise InvalidInput(
                    name,
                    value,
                    "vllm bench latency files do not record it: "
                    "give the value used on the command line",
                )
            shape[name] = int_in(value, field=name, minimum=1, maximum=most)
        cal = import_vllm_bench_latency(
            document,
            key=_key(target),
            source=filename or "vllm bench latency",
            batch_size=shape["batch_size"],
            input_len=shape["input_len"],
            output_len=shape["output_len"],
        )
        payload = calibration_to_dict(cal)
    return _calibration_store(cal, payload, source=cal.source or filename)


def _calibration_store(
    cal: EngineCalibration, payload: Mapping[str, Any], *, source: str
) -> Calibration:
    payload = _json_clean(payload)
    calibration_from_dict(payload)  # what is stored must load back
    key = cal.key
    for name, value in (
        ("gpu", key.gpu),
        ("mig_profile", key.mig_profile),
        ("model", key.model),
        ("weight_dtype", key.weight_dtype),
        ("kv_dtype", key.kv_dtype),
        ("engine_version", key.engine_version),
    ):
        most = (
            getattr(Calibration._meta.get_field(KEY_COLUMNS[name]), "max_length", 0)
            or 0
        )
        if value and len(value) > most:
            raise InvalidInput(f"key.{name}", value, f"longer than {most} characters")
    return Calibration.objects.create(
        kind=_table_kind(cal),
        gpu_type=key.gpu,
        mig_profile=key.mig_profile or "",
        model_name=key.model or "",
        weight_dtype=key.weight_dtype or "",
        kv_dtype=key.kv_dtype or "",
        tensor_parallel_size=key.tp or 1,
        engine_version=key.engine_version or "",
        payload=payload,
        fit_error=cal.fit.mape,
        source=source[:500],
    )


def calibration_fit_telemetry(
    *, deployment: Deployment, days: int = WINDOW_DAYS
) -> Calibration:
    """Fit ITL against running batch from ``deployment``'s last ``days`` of
    telemetry and store it as a "fit from telemetry" calibration, keyed to
    today's configuration (so the page and the back-test use it from now on).

    Refused (too few hours, too flat a batch, no configuration) with the field
    and value named; nothing is stored then.
    """
    try:
        cal = telemetry_fit(deployment, days=days)
    except CapacityError as exc:
        raise InvalidInput("deployment", deployment.name, str(exc)) from exc
    return _calibration_store(
        cal,
        calibration_to_dict(cal),
        source=f"telemetry of {deployment.name}, last {days} days",
    )


def telemetry_fit_parts(row: Calibration) -> str:
    """What a stored telemetry fit set, from its method (tail.fit_telemetry)."""
    method = str(row.payload.get("fit", {}).get("method", ""))
    if method.startswith("decode step kept"):
        return "the p95 tail (the decode step in effect was kept: its fit was refused)"
    if "tail not fitted" in method:
        return "the decode step (the p95 tail was not fitted)"
    return "the decode step and the p95 tail"


# ---------------------------------------------------------------------------
# Saved scenarios
# ---------------------------------------------------------------------------


def _column_record(column: Column, cells: Sequence[Cell]) -> dict[str, Any]:
    result = column.result
    return _json_clean(
        {
            "key": column.key,
            "label": column.label,
            "overrides": column.overrides,
            "scenario": adapters.scenario_to_dict(column.scenario)
            if column.scenario
            else None,
            "error": column.error,
            "feasible": result.feasible if result else None,
            "reason": result.reason if result else None,
            "calibration": result.calibration.label if result else None,
            "warnings": list(column.warnings),
            "currency": column.price.currency if column.price else None,
            "metrics": {m.field: getattr(result, m.field) for m in METRICS}
            if result
            else {},
            "cells": [c.text for c in cells],
            "deltas": [c.delta for c in cells],
        }
    )


@transaction.atomic
def scenario_save(
    *,
    name: str,
    deployment: Deployment | None,
    whatif: WhatIf,
    query: str = "",
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Scenario:
    """Store a what-if comparison as it was computed (a snapshot, shareable)."""
    if not name.strip():
        raise ValueError("name = '': a saved scenario needs a name")
    columns = whatif.columns
    table = whatif_table(whatif)
    return Scenario.objects.create(
        name=name.strip()[:200],
        deployment=deployment,
        inputs={
            "query": query,
            "deployment": deployment.name if deployment else None,
            "columns": [
                {"key": c.key, "label": c.label, "overrides": _json_clean(c.overrides)}
                for c in columns
            ],
        },
        result={
            "columns": [
                _column_record(c, cells)
                for c, cells in zip(columns, table.columns, strict=True)
            ],
            "metrics": [[m.field, m.label, m.unit] for m in METRICS],
        },
        created_by=user if isinstance(user, User) else None,
    )


def scenario_csv_export(scenario: Scenario) -> str:
    """One row per column (today and variants): inputs, then every metric.

    Numbers are written unrounded so a spreadsheet can recompute; money is in
    the column's currency, named in its own field.
    """
    columns = scenario.result.get("columns", [])
    input_names = list(adapters.SCENARIO_FIELDS)
    metric_names = [m.field for m in METRICS]
    header = [
        "scenario",
        "column",
        *input_names,
        "feasible",
        "reason",
        "calibration",
        "currency",
        *metric_names,
        "warnings",
        "error",
    ]
    rows = []
    for col in columns:
        inputs = col.get("scenario") or {}
        metrics = col.get("metrics") or {}
        rows.append(
            [
                scenario.name,
                col.get("label"),
                *("" if inputs.get(n) is None else inputs.get(n) for n in input_names),
                col.get("feasible"),
                col.get("reason") or "",
                col.get("calibration") or "",
                col.get("currency") or "",
                *(
                    "" if metrics.get(n) is None else metrics.get(n)
                    for n in metric_names
                ),
                "; ".join(col.get("warnings") or []),
                col.get("error") or "",
            ]
        )
    # Scenario names are the user's: the one writer neutralises formulas.
    return csv_text(header, rows)
