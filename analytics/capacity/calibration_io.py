"""Calibration records: versioned JSON in and out, validated field by field."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    HARDWARE_CONSTANTS,
    Calibration,
    CalibrationKey,
    FitQuality,
)
from analytics.capacity.catalog import get_gpu, get_model
from analytics.capacity.latency import LatencyParams
from analytics.errors import InvalidInput

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = {1}

# Bounds on the numbers a calibration or bench file may hold, checked before
# any conversion: JSON of a 4,300-digit integer is valid and Python reads it,
# but float() of it raises OverflowError; ``completed: 1e30`` is a float like
# any other. Each bound is far above anything measured.
MAX_INT_DIGITS = 20  # a count of tokens or bytes has 13 at most
MAX_NUMBER_CHARS = 64  # a float's text: 17 significant digits and an exponent
MAX_JSON_DEPTH = 20  # a calibration is 3 deep, a bench result 1
MAX_MAGNITUDE = 1e20  # any constant; a fit's FLOP/s stay under 1e18
MAX_COUNT = 1e12  # requests or tokens of one bench run
MAX_SECONDS = 1e7  # a run's duration or one latency (116 days)
MAX_MS = MAX_SECONDS * 1000
MAX_RATE = 1e9  # tokens or requests per second
MAX_TP = 1024  # tensor parallel size


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


def _bounded(
    value: Any, name: str, *, allow_zero: bool = False, maximum: float = MAX_MAGNITUDE
) -> float:
    """``value``: a finite number, > 0 (or >= 0) and at most ``maximum``;
    compared before it is converted, so an integer of 4,000 digits is refused,
    not an OverflowError."""
    limit = ">= 0" if allow_zero else "> 0"
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidInput(name, value, f"must be a finite number {limit}")
    if not (value > 0 or (allow_zero and value == 0)) or value != value:
        raise InvalidInput(name, value, f"must be a finite number {limit}")
    if value > maximum:
        raise InvalidInput(name, value, f"must be at most {maximum:g}")
    return float(value)


def _positive(
    data: Mapping[str, Any],
    path: str,
    *,
    allow_zero: bool = False,
    maximum: float = MAX_MAGNITUDE,
    where: str = "",
) -> float:
    """``_bounded`` of the value at ``path``; ``where`` prefixes its name."""
    name = f"{where}.{path}" if where else path
    return _bounded(_get(data, path), name, allow_zero=allow_zero, maximum=maximum)


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
    if tp_value is not None and (
        not isinstance(tp_value, int)
        or isinstance(tp_value, bool)
        or not 1 <= tp_value <= MAX_TP
    ):
        raise InvalidInput(
            f"{prefix}.tp", tp_value, f"must be an integer from 1 to {MAX_TP}"
        )
    return CalibrationKey(
        gpu=gpu,
        model=_optional_text(data, f"{prefix}.model"),
        weight_dtype=_optional_text(data, f"{prefix}.weight_dtype"),
        kv_dtype=_optional_text(data, f"{prefix}.kv_dtype"),
        tp=tp_value,
        engine_version=_optional_text(data, f"{prefix}.engine_version"),
        mig_profile=_optional_text(data, f"{prefix}.mig_profile"),
    )


def calibration_kind(data: Any) -> str:
    """The kind of a calibration document in a supported schema version;
    refuses a non-object, another version or an unknown kind, in that order."""
    if not isinstance(data, Mapping):
        raise InvalidInput("<document>", type(data).__name__, "must be a JSON object")
    version = data.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InvalidInput(
            "schema_version", version, f"supported: {sorted(SUPPORTED_SCHEMA_VERSIONS)}"
        )
    kind = data.get("kind")
    if kind not in (ENGINE_MEASUREMENTS, HARDWARE_CONSTANTS):
        raise InvalidInput(
            "kind", kind, f"must be '{ENGINE_MEASUREMENTS}' or '{HARDWARE_CONSTANTS}'"
        )
    return str(kind)


def engine_measurements_from_dict(data: Mapping[str, Any]) -> Calibration:
    """Validate an engine-measurements document; refuses with the field path
    and value. (The harness's hardware constants carry their own fit, so their
    reader lives with the fits; ``calibration.calibration_from_dict`` picks.)"""
    if calibration_kind(data) != ENGINE_MEASUREMENTS:
        raise InvalidInput("kind", data.get("kind"), f"must be '{ENGINE_MEASUREMENTS}'")
    version = data["schema_version"]
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
    if not isinstance(n_points, int) or not 1 <= n_points <= MAX_COUNT:
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
    for i, point in enumerate(points):
        _number_row(point, f"points[{i}]", allow_null=True)
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


# ---------------------------------------------------------------------------
# JSON with bounded numbers, and the bench results' figures
# ---------------------------------------------------------------------------


class _Unread:
    """A number left as text (too long to convert) until the walk names it."""

    __slots__ = ("reason", "text")

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason


def _parse_int(raw: str) -> int | _Unread:
    digits = len(raw.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Unread(
            raw, f"is an integer of {digits:,} digits; at most {MAX_INT_DIGITS}"
        )
    return int(raw)


def _parse_float(raw: str) -> float | _Unread:
    if len(raw) > MAX_NUMBER_CHARS:
        return _Unread(
            raw, f"is a number of {len(raw):,} characters; at most {MAX_NUMBER_CHARS}"
        )
    number = float(raw)
    return number if math.isfinite(number) else _Unread(raw, "overflows a float")


# Text JSON can hold but no store can: PostgreSQL refuses \u0000 in jsonb and
# text, and a lone surrogate (\ud800) is not UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_REASON = "contains a NUL character or a lone surrogate (\\u0000, \\ud800)"


def _key_shown(key: str, most: int = 40) -> str:
    return key if len(key) <= most else key[: most - 1] + "…"


def calibration_json(text: str, *, name: str = "<file>") -> Any:
    """Parsed JSON whose integers have at most ``MAX_INT_DIGITS`` digits and
    floats at most ``MAX_NUMBER_CHARS`` characters (counted on the text, before
    conversion), at most ``MAX_JSON_DEPTH`` deep; a refusal names the field
    path (``results[0].completed``; a top-level list holds bench results)."""
    try:
        document = json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            "<file>", name, f"not valid JSON: {exc.msg} at line {exc.lineno}"
        ) from None
    except RecursionError:
        raise InvalidInput(
            "<file>", name, f"nested more than {MAX_JSON_DEPTH} levels deep"
        ) from None
    # Depth first, in document order: the first refusal is the first in the file.
    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(
                path, "…", f"nested more than {MAX_JSON_DEPTH} levels deep"
            )
        # Values cut to 80 characters: a message never carries a 4,300-digit number.
        if isinstance(node, _Unread):
            text = _key_shown(node.text, 80)
            raise InvalidInput(path or "<document>", text, node.reason)
        if isinstance(node, str) and _UNSTORABLE.search(node):
            text = _key_shown(node, 80)
            raise InvalidInput(path or "<document>", text, _UNSTORABLE_REASON)
        if isinstance(node, dict):
            for key in node:
                if _UNSTORABLE.search(key):
                    where = f"{path} key" if path else "<document> key"
                    raise InvalidInput(where, _key_shown(key, 80), _UNSTORABLE_REASON)
            children = [
                (v, f"{path}.{_key_shown(k)}" if path else _key_shown(k))
                for k, v in node.items()
            ]
        elif isinstance(node, list):
            children = [(v, f"{path or 'results'}[{i}]") for i, v in enumerate(node)]
        else:
            continue
        stack.extend((v, p, depth + 1) for v, p in reversed(children))
    return document


def _number_row(
    row: Any, where: str, *, allow_null: bool = False, names: tuple[str, ...] = ()
) -> dict[str, float]:
    """An object of finite numbers of magnitude at most ``MAX_MAGNITUDE``
    (``names`` are required and >= 0): a fit's point or an attention row."""
    if not isinstance(row, Mapping):
        raise InvalidInput(where, type(row).__name__, "must be a JSON object")
    for name in names:
        if row.get(name) is None:
            raise InvalidInput(f"{where}.{name}", None, "missing")
        _positive(row, name, allow_zero=True, where=where)
    out: dict[str, float] = {}
    for key, value in row.items():
        if value is None and allow_null:
            continue
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE
        ):
            raise InvalidInput(
                f"{where}.{_key_shown(str(key))}",
                value,
                f"must be a finite number of magnitude at most {MAX_MAGNITUDE:g}",
            )
        out[str(key)] = float(value)
    return out


# A vllm bench serve run's figures: name -> (required, zero allowed, at most).
BENCH_SERVE_FIGURES: dict[str, tuple[bool, bool, float]] = {
    "completed": (True, False, MAX_COUNT),
    "duration": (True, False, MAX_SECONDS),
    "output_throughput": (True, False, MAX_RATE),
    "total_input_tokens": (True, False, MAX_COUNT),
    "total_output_tokens": (True, False, MAX_COUNT),
    "median_ttft_ms": (True, False, MAX_MS),
    "median_itl_ms": (False, False, MAX_MS),
    "mean_tpot_ms": (False, True, MAX_MS),
    "p99_itl_ms": (False, True, MAX_MS),
    "max_concurrency": (False, True, MAX_COUNT),  # null: no limit
}


def bench_serve_figures(res: Any, where: str) -> dict[str, float]:
    """One ``vllm bench serve`` run's figures, each finite, not negative and
    within its bound; adds ``step_ms`` (median ITL, else mean TPOT) and
    ``tpot_ms`` (mean TPOT, else the step)."""
    if not isinstance(res, Mapping):
        raise InvalidInput(where, type(res).__name__, "must be a JSON object")
    figures: dict[str, float] = {}
    for name, (required, allow_zero, maximum) in BENCH_SERVE_FIGURES.items():
        if res.get(name) is None:
            if required:
                raise InvalidInput(f"{where}.{name}", None, "missing from bench result")
            continue
        figures[name] = _positive(
            res, name, allow_zero=allow_zero, maximum=maximum, where=where
        )
    rate = res.get("request_rate")
    # The result file writes "inf" for no limit; an older one, Infinity.
    if not (
        rate is None
        or (isinstance(rate, str) and rate.strip().lower() == "inf")
        or (isinstance(rate, float) and rate == math.inf)
    ):
        _positive(res, "request_rate", allow_zero=True, maximum=MAX_RATE, where=where)
    step_ms = figures.get("median_itl_ms") or figures.get("mean_tpot_ms")
    if not step_ms:
        raise InvalidInput(
            f"{where}.median_itl_ms", None, "missing from bench result (and no "
            "mean_tpot_ms above 0)"
        )  # fmt: skip
    figures["step_ms"] = step_ms
    figures["tpot_ms"] = figures.get("mean_tpot_ms") or step_ms
    return figures


def bench_latencies(result: Mapping[str, Any]) -> list[float]:
    """``vllm bench latency``'s ``latencies``: seconds, each > 0 and bounded."""
    latencies = result.get("latencies")
    if not isinstance(latencies, list) or not latencies:
        raise InvalidInput("latencies", latencies, "must be a non-empty list")
    return [
        _bounded(v, f"latencies[{i}]", maximum=MAX_SECONDS)
        for i, v in enumerate(latencies)
    ]
