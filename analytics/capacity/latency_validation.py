"""Latency validation: public serving benchmarks against the engine's simulation.

Each row of ``data/latency_validation.json`` is one published
``benchmark_serving.py`` / ``vllm bench serve`` result (model, GPU, TP, lengths,
load, measured TTFT, ITL and output throughput, with its link). Each row is
predicted three ways, always through ``simulate`` on ``step_model``:

- ``roofline``: no calibration;
- ``transfer``: constants fitted (``import_vllm_bench_serve``) on the runs of
  *another* model on the same GPU type and engine version, used for this model;
- ``same_model``: constants fitted on the *other* runs of the same model, GPU,
  TP and version (leave-one-out), never on the row itself.

Load shapes:

- ``burst`` (``--request-rate inf`` without ``--max-concurrency``): every
  request arrives at t = 0, as the client sends them;
- ``concurrency`` (closed loop at ``--max-concurrency C``): the client sends C
  requests at t = 0 and one more as each completes, simulated as that closed
  loop (``simulate(concurrency=C)``);
- ``rate`` (``--request-rate R``): Poisson arrivals at R.

The KV pool is the one the run reports (``kv_cache_memory_gib``, vLLM's
"Available KV cache memory" at start-up, given to the engine as
``kv_cache_memory_bytes``, vLLM's ``--kv-cache-memory``) where the write-up
gives it, so these rows test the step model and the scheduler, not the memory
model (validated on its own against start-up logs); elsewhere it is the memory
model's.

Every request reaches the engine p0 (the per-request overhead: API server,
tokenisation) after it is sent, and output throughput is the completed requests'
output tokens over the run, first send to last completion, as the benchmark
computes it.

Pure: no I/O but the named loader ``load_benchmarks``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity.calibration_fit import import_vllm_bench_serve
from analytics.capacity.calibration_io import CalibrationRefused
from analytics.capacity.calibration_types import Calibration, CalibrationKey
from analytics.capacity.catalog import get_model
from analytics.capacity.engine import Scenario, StepModel, step_model
from analytics.capacity.simulate import poisson_arrivals, simulate
from analytics.errors import InvalidInput

DATA_PATH = Path(__file__).parent / "data" / "latency_validation.json"
METHODS = ("roofline", "transfer", "same_model")
METRICS = ("ttft", "itl", "throughput")
LOADS = {"burst", "concurrency", "rate"}
# Closed-loop rows without a stated prompt count are simulated with this many
# requests per concurrent slot (enough for the ramp to be a small share).
REQUESTS_PER_SLOT = 20
GIB = 1 << 30  # vLLM logs memory in GiB


@dataclass(frozen=True)
class Measured:
    median_ttft_ms: float
    median_itl_ms: float
    output_throughput: float
    mean_tpot_ms: float | None = None
    p99_itl_ms: float | None = None
    completed: int | None = None
    duration_s: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None


@dataclass(frozen=True)
class BenchRow:
    id: str
    source: str
    gpu: str
    model: str
    model_as: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    engine_version: str
    version_stated: str
    gpu_memory_utilization: float
    max_model_len: int | None
    kv_cache_memory_gib: float | None
    input_len: int
    output_len: int
    load: str
    dataset: str
    num_prompts: int | None
    max_concurrency: int | None
    request_rate: float | None
    measured: Measured

    @property
    def mean_input(self) -> float:
        m = self.measured
        if m.total_input_tokens and m.completed:
            return m.total_input_tokens / m.completed
        return float(self.input_len)

    @property
    def mean_output(self) -> float:
        m = self.measured
        if m.total_output_tokens and m.completed:
            return m.total_output_tokens / m.completed
        return float(self.output_len)

    @property
    def setting(self) -> tuple[str, str, int, str, str]:
        """What a same-model calibration must share with the row it predicts."""
        return (
            self.gpu,
            self.model_as,
            self.tp,
            self.weight_dtype,
            self.engine_version,
        )


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _number(
    row: Mapping[str, Any], name: str, where: str, *, optional: bool = False
) -> Any:
    value = row.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(f"{where}.{name}", value, "must be a number > 0")
    return value


def row_from_dict(data: Mapping[str, Any], where: str = "row") -> BenchRow:
    load = data.get("load")
    if load not in LOADS:
        raise InvalidInput(f"{where}.load", load, f"must be one of {sorted(LOADS)}")
    measured = data.get("measured")
    if not isinstance(measured, Mapping):
        raise InvalidInput(f"{where}.measured", measured, "must be an object")
    mw = f"{where}.measured"
    opt = {"optional": True}
    m = Measured(
        median_ttft_ms=float(_number(measured, "median_ttft_ms", mw)),
        median_itl_ms=float(_number(measured, "median_itl_ms", mw)),
        output_throughput=float(_number(measured, "output_throughput", mw)),
        mean_tpot_ms=_number(measured, "mean_tpot_ms", mw, **opt),
        p99_itl_ms=_number(measured, "p99_itl_ms", mw, **opt),
        completed=_number(measured, "completed", mw, **opt),
        duration_s=_number(measured, "duration_s", mw, **opt),
        total_input_tokens=_number(measured, "total_input_tokens", mw, **opt),
        total_output_tokens=_number(measured, "total_output_tokens", mw, **opt),
    )
    for name in ("id", "source", "gpu", "model", "model_as", "engine_version"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise InvalidInput(f"{where}.{name}", data.get(name), "must be a string")
    if load == "burst":
        _number(data, "num_prompts", where)
    if load == "concurrency":
        _number(data, "max_concurrency", where)
    if load == "rate":
        _number(data, "request_rate", where)
        _number(data, "num_prompts", where)
    return BenchRow(
        id=data["id"],
        source=data["source"],
        gpu=data["gpu"],
        model=data["model"],
        model_as=data["model_as"],
        tp=int(_number(data, "tp", where)),
        weight_dtype=str(data.get("weight_dtype", "bf16")),
        kv_dtype=str(data.get("kv_dtype", "auto")),
        engine_version=data["engine_version"],
        version_stated=str(data.get("version_stated", "")),
        gpu_memory_utilization=float(_number(data, "gpu_memory_utilization", where)),
        max_model_len=_number(data, "max_model_len", where, optional=True),
        kv_cache_memory_gib=_number(data, "kv_cache_memory_gib", where, optional=True),
        input_len=int(_number(data, "input_len", where)),
        output_len=int(_number(data, "output_len", where)),
        load=str(load),
        dataset=str(data.get("dataset", "random")),
        num_prompts=_number(data, "num_prompts", where, optional=True),
        max_concurrency=_number(data, "max_concurrency", where, optional=True),
        request_rate=_number(data, "request_rate", where, optional=True),
        measured=m,
    )


def load_benchmarks(path: str | Path = DATA_PATH) -> list[BenchRow]:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = doc.get("rows") if isinstance(doc, Mapping) else None
    if not isinstance(rows, list) or not rows:
        raise InvalidInput("rows", rows, "must be a non-empty list")
    return [row_from_dict(r, f"rows[{i}]") for i, r in enumerate(rows)]


# ---------------------------------------------------------------------------
# Load shapes
# ---------------------------------------------------------------------------


def steady_batch_for_rate(rate: float, output_tokens: float, itl_s: float) -> float:
    """Sequences decoding at once at ``rate`` req/s: λ x time spent decoding."""
    if rate < 0 or output_tokens < 1 or itl_s <= 0:
        raise InvalidInput("rate/output/itl", (rate, output_tokens, itl_s), "bad")
    return rate * (output_tokens - 1) * itl_s


def arrivals_for(row: BenchRow, model: StepModel, seed: int = 0) -> np.ndarray:
    """When each request reaches the engine: the client's send time plus the
    per-request overhead p0 (API server, tokenisation) before the engine sees
    it, so the run's duration, from the first send, holds it too.

    For a closed loop only the first C are given (all sent at t = 0, as the
    client opens); ``simulate(concurrency=C, resubmit_s=p0)`` sends the rest as
    requests complete.
    """
    p0 = model.p0_s
    if row.load == "burst":
        return np.full(int(row.num_prompts or 0), p0)
    if row.load == "rate":
        rate = float(row.request_rate or 0.0)
        n = int(row.num_prompts or 0)
        arrivals: np.ndarray = poisson_arrivals(rate, n / rate, seed=seed) + p0
        return arrivals
    c = int(row.max_concurrency or 1)
    return np.full(int(row.num_prompts or REQUESTS_PER_SLOT * c), p0)


# ---------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------


def scenario_for(row: BenchRow) -> Scenario:
    return Scenario(
        model=row.model_as,
        gpu=row.gpu,
        tp=row.tp,
        weight_dtype=row.weight_dtype,
        kv_dtype=row.kv_dtype,
        engine_version=row.engine_version,
        gpu_memory_utilization=row.gpu_memory_utilization,
        max_model_len=row.max_model_len,
        kv_cache_memory_bytes=(
            row.kv_cache_memory_gib * GIB if row.kv_cache_memory_gib else None
        ),
        prompt_tokens=round(row.mean_input),
        output_tokens=round(row.mean_output),
    )


def bench_result(row: BenchRow) -> dict[str, float | str]:
    """The row as ``import_vllm_bench_serve`` reads a ``--save-result`` file.

    Rows published as a table (no totals) are given per request: one completed
    request of the stated lengths; the importer only uses the ratios.
    """
    m = row.measured
    completed = m.completed or 1
    result: dict[str, float | str] = {
        "completed": completed,
        "duration": m.duration_s or row.mean_output * completed / m.output_throughput,
        "output_throughput": m.output_throughput,
        "total_input_tokens": m.total_input_tokens or row.input_len,
        "total_output_tokens": m.total_output_tokens or row.output_len,
        "median_ttft_ms": m.median_ttft_ms,
        "median_itl_ms": m.median_itl_ms,
    }
    if m.mean_tpot_ms:
        result["mean_tpot_ms"] = m.mean_tpot_ms
    if m.p99_itl_ms:
        result["p99_itl_ms"] = m.p99_itl_ms
    if row.max_concurrency:
        result["max_concurrency"] = row.max_concurrency
    # As the result file writes it: the rate, or "inf" for no limit.
    if row.load == "rate" and row.request_rate:
        result["request_rate"] = row.request_rate
    elif row.load == "burst":
        result["request_rate"] = "inf"
    return result


def _key(row: BenchRow, model: str) -> CalibrationKey:
    return CalibrationKey(
        gpu=row.gpu,
        model=model,
        weight_dtype=row.weight_dtype,
        kv_dtype=row.kv_dtype,
        tp=row.tp,
        engine_version=row.engine_version,
    )


def fit_on(rows: Sequence[BenchRow]) -> Calibration:
    """Engine calibration fitted on ``rows`` (one setting) by the bench importer."""
    first = rows[0]
    return import_vllm_bench_serve(
        [bench_result(r) for r in rows],
        key=_key(first, first.model_as),
        source="latency validation: " + ", ".join(r.id for r in rows),
        # The runs' server, as the engine has it for their setting.
        max_num_batched_tokens=step_model(scenario_for(first)).max_num_batched_tokens,
    )


def roofline_t0_s(model_name: str, tp: int) -> float:
    layers = get_model(model_name).layers
    t0 = lat.STEP_OVERHEAD_S + layers * lat.STEP_OVERHEAD_PER_LAYER_S
    return t0 + (2 * layers * lat.ALLREDUCE_S if tp > 1 else 0.0)


def transferred(cal: Calibration, target: BenchRow) -> Calibration:
    """Another model's fitted constants, used for ``target``'s model.

    Bandwidth, FLOP/s and the prefill overhead are the GPU's and engine's; the
    per-step overhead grows with the layer count, so it is scaled by the
    roofline's per-step overhead of the two models.
    """
    source_model = str(cal.key.model)
    scale = roofline_t0_s(target.model_as, target.tp) / roofline_t0_s(
        source_model, cal.key.tp or 1
    )
    params = replace(cal.params, t0_s=cal.params.t0_s * scale)
    return replace(
        cal,
        key=_key(target, target.model_as),
        params=params,
        source=f"{cal.source} (transferred from {source_model})",
    )


def transfer_sources(row: BenchRow, rows: Sequence[BenchRow]) -> list[BenchRow]:
    """Runs of another model on the same GPU type, TP, dtype and engine version."""
    return [
        r
        for r in rows
        if r.model_as != row.model_as
        and (r.gpu, r.tp, r.weight_dtype, r.engine_version)
        == (row.gpu, row.tp, row.weight_dtype, row.engine_version)
    ]


def same_model_sources(row: BenchRow, rows: Sequence[BenchRow]) -> list[BenchRow]:
    return [r for r in rows if r.id != row.id and r.setting == row.setting]


@dataclass(frozen=True)
class Prediction:
    ttft_ms: float
    itl_ms: float
    throughput: float


def predict(row: BenchRow, calibration: Calibration | None = None) -> Prediction:
    cals = (calibration,) if calibration is not None else ()
    model = step_model(scenario_for(row), calibrations=cals)
    closed = row.load == "concurrency"
    sim = simulate(
        model,
        arrivals_for(row, model),
        prompt_tokens=round(row.mean_input),
        output_tokens=round(row.mean_output),
        concurrency=int(row.max_concurrency or 1) if closed else None,
        resubmit_s=model.p0_s,
    )
    # Output tokens of the completed requests over the run, from the first send
    # to the last completion, as the benchmark computes it: the first prefill,
    # each request's p0, the last partial wave and the stragglers are in it.
    # TTFT is counted from the engine's arrival; the client sent p0 earlier.
    return Prediction(
        sim.ttft_p50_ms + model.p0_s * 1000.0,
        sim.itl_p50_ms,
        sim.throughput_tokens_per_s,
    )


def _groups(rows: Sequence[BenchRow], key: Any) -> dict[Any, list[BenchRow]]:
    out: dict[Any, list[BenchRow]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def calibrations_for(
    row: BenchRow, rows: Sequence[BenchRow]
) -> dict[str, Calibration | None]:
    """The calibration each method uses for ``row`` (None: roofline or no data)."""
    transfer: Calibration | None = None
    sources = transfer_sources(row, rows)
    if sources:
        # One fit per other model; with several, the one with most runs.
        by_model = _groups(sources, lambda r: r.model_as)
        best = max(by_model.values(), key=len)
        fitted = _fit_or_none(best)
        transfer = transferred(fitted, row) if fitted is not None else None
    same = same_model_sources(row, rows)
    return {
        "roofline": None,
        "transfer": transfer,
        "same_model": _fit_or_none(same) if same else None,
    }


def _fit_or_none(rows: Sequence[BenchRow]) -> Calibration | None:
    """The fit, or None where the importer refuses the runs (all prefill-bound)."""
    try:
        return fit_on(rows)
    except CalibrationRefused:
        return None


def _error(predicted: float, actual: float) -> float:
    return (predicted - actual) / actual


def validation_table(rows: Sequence[BenchRow]) -> pd.DataFrame:
    """One line per row and method: measured, predicted and signed error."""
    records = []
    for row in rows:
        m = row.measured
        actual = {
            "ttft": m.median_ttft_ms,
            "itl": m.median_itl_ms,
            "throughput": m.output_throughput,
        }
        for method, cal in calibrations_for(row, rows).items():
            record: dict[str, Any] = {
                "id": row.id,
                "method": method,
                "gpu": row.gpu,
                "model": row.model_as,
                "calibration": cal.source if cal is not None else None,
            }
            if method != "roofline" and cal is None:
                for metric in METRICS:
                    record[f"{metric}_pred"] = None
                    record[f"{metric}_error"] = None
            else:
                pred = predict(row, cal)
                values = {
                    "ttft": pred.ttft_ms,
                    "itl": pred.itl_ms,
                    "throughput": pred.throughput,
                }
                for metric in METRICS:
                    record[f"{metric}_pred"] = values[metric]
                    record[f"{metric}_error"] = _error(values[metric], actual[metric])
            for metric in METRICS:
                record[f"{metric}_actual"] = actual[metric]
            records.append(record)
    return pd.DataFrame.from_records(records)


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max absolute error per method and metric, over rows it covers."""
    out = []
    for method in METHODS:
        part = table[table["method"] == method]
        entry: dict[str, Any] = {"method": method}
        for metric in METRICS:
            errors = part[f"{metric}_error"].dropna().abs()
            entry["rows"] = len(errors)
            entry[f"{metric}_median"] = float(errors.median()) if len(errors) else None
            entry[f"{metric}_max"] = float(errors.max()) if len(errors) else None
            entry[f"{metric}_within_15"] = int((errors <= 0.15).sum())
        out.append(entry)
    return pd.DataFrame.from_records(out).set_index("method")


# ---------------------------------------------------------------------------
# The tables of docs/capacity-validation.md ("Latency validation")
# ---------------------------------------------------------------------------


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    return f"{value * 100:+.1f}%"


def _load_text(row: BenchRow) -> str:
    if row.load == "burst":
        return f"burst of {row.num_prompts}"
    if row.load == "concurrency":
        return f"max-concurrency {row.max_concurrency}"
    return f"{row.request_rate} req/s x {row.num_prompts}"


def _lengths_text(row: BenchRow) -> str:
    if row.dataset == "sharegpt":
        return f"ShareGPT, means {row.mean_input:.1f} / {row.mean_output:.1f}"
    return f"{row.input_len} / {row.output_len}"


def rows_markdown(rows: Sequence[BenchRow]) -> list[str]:
    """The measured rows: setting, load, figures and link."""
    lines = [
        "| id | GPU | model (catalogue) | TP | vLLM | load | in / out | "
        "TTFT p50 ms | ITL p50 ms | out tok/s | source |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m = r.measured
        lines.append(
            f"| {r.id} | {r.gpu} | {r.model} ({r.model_as}) | {r.tp} | "
            f"{r.version_stated} | {_load_text(r)} | {_lengths_text(r)} | "
            f"{m.median_ttft_ms:,.1f} | {m.median_itl_ms:.2f} | "
            f"{m.output_throughput:,.1f} | {r.source} |"
        )
    return lines


def errors_markdown(table: pd.DataFrame) -> list[str]:
    """Signed error per row: TTFT / median ITL / output throughput, per method."""
    lines = [
        "| id | roofline TTFT / ITL / tok/s | transfer TTFT / ITL / tok/s | "
        "same-model TTFT / ITL / tok/s |",
        "| --- | --- | --- | --- |",
    ]
    for row_id, part in table.groupby("id", sort=False):
        cells = []
        for method in METHODS:
            line = part[part["method"] == method].iloc[0]
            cells.append(" / ".join(_pct(line[f"{m}_error"]) for m in METRICS))
        lines.append(f"| {row_id} | " + " | ".join(cells) + " |")
    return lines


def summary_markdown(summary: pd.DataFrame) -> list[str]:
    lines = [
        "| method | rows | TTFT median / max | ITL median / max | ITL within 15% | "
        "tok/s median / max | tok/s within 15% |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method, s in summary.iterrows():

        def mm(metric: str, s: Any = s) -> str:
            return (
                f"{s[f'{metric}_median'] * 100:.1f}% / {s[f'{metric}_max'] * 100:.1f}%"
            )

        n = int(s["rows"])
        lines.append(
            f"| {method} | {n} | {mm('ttft')} | {mm('itl')} | "
            f"{int(s['itl_within_15'])} of {n} | {mm('throughput')} | "
            f"{int(s['throughput_within_15'])} of {n} |"
        )
    return lines
