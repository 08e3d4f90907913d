"""Reads for the capacity pages: what runs today, and what-if comparisons.

Today's configuration is assembled from the fleet (model, GPU, TP, MIG, engine),
what telemetry discovered (``vllm:cache_config_info``), the busiest hour of the
last seven days (traffic and request shape) and the rate card. Every value
carries where it came from, so a default is never mistaken for a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
from django.utils import timezone

from analytics.capacity import engine as capacity_engine
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.engine import Result, Scenario
from analytics.capacity.errors import CapacityError, InvalidInput
from costapp.capacity import adapters
from costapp.costs.rates import rate_book
from costapp.models import Calibration, Deployment, DeploymentHour
from costapp.models import Scenario as SavedScenario

DEFAULT_ITL_MS = 50.0
DEFAULT_TTFT_MS = 2000.0
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_OUTPUT_TOKENS = 256
PEAK_WINDOW = timedelta(days=7)
DASH = "\u2013"  # shown where a figure is missing (not zero)


# ---------------------------------------------------------------------------
# Today
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    value: Any
    origin: str  # fleet, discovered, observed, rate card, default, assumed
    blank: str = "engine default"  # what None means for this setting

    @property
    def text(self) -> str:
        return self.blank if self.value is None else str(self.value)


@dataclass(frozen=True)
class PeakTraffic:
    hour: datetime
    requests_per_s: float
    prompt_tokens: float | None  # mean per request; None when no requests
    output_tokens: float | None
    hours_with_data: int


@dataclass(frozen=True)
class Price:
    per_gpu_hour: Decimal
    currency: str
    gpu_type: str


@dataclass(frozen=True)
class Today:
    deployment: Deployment
    scenario: Scenario | None
    settings: dict[str, Setting]
    discovered: dict[str, Any]
    observed_blocks: int | None
    traffic: PeakTraffic | None
    price: Price | None
    problems: tuple[str, ...] = ()


def peak_hour_traffic(
    deployment: Deployment, *, now: datetime | None = None
) -> PeakTraffic | None:
    """The busiest UTC hour of the last seven days, by finished requests.

    Hours without rows are missing, not zero; an hour with no finished requests
    has no request shape (tokens / 0 is not a number).
    """
    now = now or timezone.now()
    rows = list(
        DeploymentHour.objects.filter(
            deployment=deployment, hour__gte=now - PEAK_WINDOW, hour__lt=now
        ).only(
            "hour",
            "requests_stop",
            "requests_length",
            "prompt_tokens",
            "generation_tokens",
        )
    )
    if not rows:
        return None
    peak = max(rows, key=lambda r: (r.requests, r.hour))
    requests = peak.requests
    return PeakTraffic(
        hour=peak.hour,
        requests_per_s=requests / 3600.0,
        prompt_tokens=peak.prompt_tokens / requests if requests > 0 else None,
        output_tokens=peak.generation_tokens / requests if requests > 0 else None,
        hours_with_data=len(rows),
    )


def gpu_hour_price(
    *,
    gpu_type: str,
    instance_type: str = "",
    region: str = "us-east-1",
    day: date | None = None,
) -> Price | None:
    """$ per GPU-hour in force on ``day`` (instance price / GPUs per instance)."""
    found = rate_book().per_gpu_hour(
        gpu_type=gpu_type,
        instance_type=instance_type,
        region=region,
        day=day or timezone.now().date(),
    )
    if found is None:
        return None
    price, currency = found
    return Price(per_gpu_hour=Decimal(price), currency=currency, gpu_type=gpu_type)


def _number(value: Any, kind: type) -> Any:
    """A label value as a number; Prometheus labels are strings ("0.9", "None")."""
    if value is None or value == "" or str(value).lower() in {"none", "null"}:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return int(number) if kind is int else number


def _discovered(deployment: Deployment) -> dict[str, Any]:
    try:
        discovery = deployment.discovery
    except Deployment.discovery.RelatedObjectDoesNotExist:  # type: ignore[attr-defined]
        return {}
    return dict(discovery.cache_config or {})


def today(deployment: Deployment, *, now: datetime | None = None) -> Today:
    """What runs today, as a scenario the engine can evaluate."""
    now = now or timezone.now()
    settings: dict[str, Setting] = {}
    problems: list[str] = []
    config = _discovered(deployment)

    try:
        model = adapters.catalogue_model_name(deployment.model_name)
        settings["model"] = Setting(model, "fleet")
    except InvalidInput as exc:
        model = ""
        problems.append(str(exc))
    settings["gpu"] = Setting(deployment.gpu_type, "fleet")
    settings["tp"] = Setting(deployment.tensor_parallel_size, "fleet")
    settings["mig_profile"] = Setting(
        deployment.mig_profile or None, "fleet", "whole GPU"
    )
    if deployment.engine != "vllm":
        problems.append(
            f"engine {deployment.engine}: the memory model is vLLM's, so pool and "
            "blocks are vLLM's figures for the same settings"
        )
    if deployment.engine_version:
        settings["engine_version"] = Setting(deployment.engine_version, "fleet")
    else:
        settings["engine_version"] = Setting(adapters.DEFAULT_ENGINE_VERSION, "default")
    quant = adapters.weight_dtype_from_name(deployment.model_name)
    settings["weight_dtype"] = Setting(quant or "bf16", "assumed")

    cache_dtype = str(config.get("cache_dtype") or "").lower()
    if cache_dtype in adapters.KV_DTYPES:
        settings["kv_dtype"] = Setting(cache_dtype, "discovered")
    else:
        settings["kv_dtype"] = Setting("auto", "default")
        if cache_dtype:
            problems.append(f"discovered cache_dtype={cache_dtype!r} is not known")
    for name, kind, default in (
        ("block_size", int, 16),
        ("gpu_memory_utilization", float, 0.9),
        ("max_model_len", int, None),  # None: the model's maximum
        ("max_num_seqs", int, None),
        ("max_num_batched_tokens", int, None),
    ):
        value = _number(config.get(name), kind)
        if value is not None and value > 0:
            settings[name] = Setting(value, "discovered")
        else:
            blank = "model maximum" if name == "max_model_len" else "engine default"
            settings[name] = Setting(default, "default", blank)
    eager = str(config.get("enforce_eager", "")).lower()
    settings["enforce_eager"] = (
        Setting(eager == "true", "discovered")
        if eager in {"true", "false"}
        else Setting(False, "default")
    )
    observed_blocks = _number(config.get("num_gpu_blocks"), int)

    traffic = peak_hour_traffic(deployment, now=now)
    if traffic is not None and traffic.prompt_tokens is not None:
        settings["prompt_tokens"] = Setting(round(traffic.prompt_tokens), "observed")
        settings["output_tokens"] = Setting(
            max(1, round(traffic.output_tokens or 0)), "observed"
        )
        settings["target_requests_per_s"] = Setting(
            round(traffic.requests_per_s, 4), "observed"
        )
    else:
        settings["prompt_tokens"] = Setting(DEFAULT_PROMPT_TOKENS, "default")
        settings["output_tokens"] = Setting(DEFAULT_OUTPUT_TOKENS, "default")
        settings["target_requests_per_s"] = Setting(None, "default", "none (1 replica)")
    settings["itl_sla_ms"] = (
        Setting(float(deployment.slo_itl_p95_ms), "fleet")
        if deployment.slo_itl_p95_ms
        else Setting(DEFAULT_ITL_MS, "default")
    )
    settings["ttft_sla_ms"] = (
        Setting(float(deployment.slo_ttft_p95_ms), "fleet")
        if deployment.slo_ttft_p95_ms
        else Setting(DEFAULT_TTFT_MS, "default")
    )
    settings["sla_percentile"] = Setting(0.95, "fleet")

    price = gpu_hour_price(
        gpu_type=deployment.gpu_type,
        instance_type=deployment.instance_type,
        region=deployment.region,
        day=now.date(),
    )
    if price is None:
        problems.append(
            f"no rate card for {deployment.gpu_type} on {now.date()}: costs not computed"
        )

    scenario = None
    if model:
        values = {k: s.value for k, s in settings.items()}
        values["gpu_hour_price"] = float(price.per_gpu_hour) if price else None
        try:
            scenario = adapters.scenario_with(
                Scenario(model=model, gpu=deployment.gpu_type), values
            )
        except InvalidInput as exc:
            problems.append(str(exc))
    return Today(
        deployment=deployment,
        scenario=scenario,
        settings=settings,
        discovered=config,
        observed_blocks=observed_blocks,
        traffic=traffic,
        price=price,
        problems=tuple(problems),
    )


def stored_calibrations() -> list[EngineCalibration]:
    return adapters.engine_calibrations(Calibration.objects.all())


# ---------------------------------------------------------------------------
# What-if columns
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    field: str
    label: str
    unit: str
    scale: float = 1.0
    digits: int = 0
    better: str = "higher"  # or "lower"
    money: bool = False


METRICS: tuple[Metric, ...] = (
    Metric(
        "kv_bytes_per_token",
        "KV bytes per token (per GPU)",
        "KiB",
        1 / 1024,
        1,
        "lower",
    ),
    Metric("kv_cache_memory_bytes", "KV pool", "GiB", 1 / 1024**3, 2),
    Metric("kv_cache_tokens", "KV pool", "tokens"),
    Metric("num_gpu_blocks", "KV blocks", "blocks"),
    Metric("max_concurrency", "Max concurrency (this request shape)", "seqs", 1, 1),
    Metric("batch_size", "Batch within the ITL SLA", "seqs"),
    Metric("decode_step_ms", "Decode step at that batch", "ms", 1, 2, "lower"),
    Metric("itl_at_percentile_ms", "ITL at the SLA percentile", "ms", 1, 1, "lower"),
    Metric("ttft_ms", "TTFT without queueing", "ms", 1, 0, "lower"),
    Metric("throughput_tokens_per_s", "Output tokens/s per replica", "tok/s", 1, 0),
    Metric(
        "max_requests_per_s_within_sla",
        "Requests/s per replica within SLA",
        "req/s",
        1,
        2,
    ),
    Metric("replicas", "Replicas for the target", "", 1, 0, "lower"),
    Metric("gpus_needed", "GPUs needed", "GPU", 1, 2, "lower"),
    Metric("cost_per_hour", "Cost per hour", "/h", 1, 2, "lower", True),
    Metric(
        "cost_per_1k_requests", "Cost per 1k requests", "/1k req", 1, 4, "lower", True
    ),
    Metric("cost_per_1m_tokens", "Cost per 1M tokens", "/1M tok", 1, 4, "lower", True),
)


@dataclass(frozen=True)
class Cell:
    text: str
    delta: str = ""
    tone: str = ""  # good, bad or ""


@dataclass(frozen=True)
class Column:
    key: str  # "today", "a", "b", "c"
    label: str
    overrides: dict[str, Any]
    scenario: Scenario | None
    result: Result | None
    error: str | None = None
    price: Price | None = None
    cells: tuple[Cell, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def calibration_label(self) -> str:
        return self.result.calibration.label if self.result else ""


@dataclass(frozen=True)
class WhatIf:
    today: Today
    columns: tuple[Column, ...]
    metrics: tuple[Metric, ...] = METRICS
    rows: tuple[tuple[Metric, tuple[Cell, ...]], ...] = field(default_factory=tuple)
    blocks_check: str | None = None


def _value(result: Result, metric: Metric) -> float | None:
    raw = getattr(result, metric.field)
    if raw is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def _format(value: float | None, metric: Metric, currency: str) -> str:
    if value is None:
        return DASH
    shown = value * metric.scale
    text = f"{shown:,.{metric.digits}f}"
    if metric.money:
        return f"{currency} {text}{metric.unit}"
    return f"{text} {metric.unit}".strip()


def _delta(base: float | None, value: float | None, metric: Metric) -> Cell:
    if base is None or value is None:
        return Cell("")
    diff = (value - base) * metric.scale
    if abs(diff) < 0.5 * 10 ** (-metric.digits):
        return Cell("=", "", "")
    rel = f" ({(value - base) / base:+.0%})" if base else ""
    better = (diff > 0) == (metric.better == "higher")
    return Cell(f"{diff:+,.{metric.digits}f}{rel}", "", "good" if better else "bad")


def _cells(
    result: Result | None, base: Result | None, currency: str
) -> tuple[Cell, ...]:
    cells = []
    for metric in METRICS:
        if result is None:
            cells.append(Cell(DASH))
            continue
        value = _value(result, metric)
        text = _format(value, metric, currency)
        if base is None or base is result:
            cells.append(Cell(text))
            continue
        delta = _delta(_value(base, metric), value, metric)
        cells.append(Cell(text, delta.text, delta.tone))
    return tuple(cells)


def _evaluate(
    scenario: Scenario, calibrations: Sequence[EngineCalibration]
) -> tuple[Result | None, str | None]:
    try:
        return capacity_engine.evaluate(scenario, calibrations=calibrations), None
    except CapacityError as exc:
        return None, str(exc)


def whatif(
    today_: Today,
    variants: Sequence[tuple[str, str, Mapping[str, Any]]],
    *,
    calibrations: Sequence[EngineCalibration] | None = None,
) -> WhatIf:
    """Today beside each variant ``(key, label, overrides)``.

    A variant that moves to another GPU type is priced from that GPU's rate card
    (no instance type, since the deployment's instance cannot hold it).
    """
    cals = stored_calibrations() if calibrations is None else list(calibrations)
    base = today_.scenario
    currency = today_.price.currency if today_.price else "USD"
    columns: list[Column] = []
    base_result: Result | None = None
    if base is not None:
        base_result, error = _evaluate(base, cals)
        columns.append(
            Column(
                "today",
                "Today",
                {},
                base,
                base_result,
                error,
                today_.price,
                _cells(base_result, None, currency),
                base_result.warnings if base_result else (),
            )
        )
    for key, label, overrides in variants:
        if base is None:
            break
        changes = dict(overrides)
        price = today_.price
        gpu = changes.get("gpu")
        if gpu and gpu != base.gpu:
            price = gpu_hour_price(gpu_type=str(gpu), region=today_.deployment.region)
            changes["gpu_hour_price"] = float(price.per_gpu_hour) if price else None
            if "mig_profile" not in changes:
                changes["mig_profile"] = None  # today's profile belongs to today's GPU
        try:
            scenario = adapters.scenario_with(base, changes)
        except InvalidInput as exc:
            columns.append(Column(key, label, dict(overrides), None, None, str(exc)))
            continue
        result, error = _evaluate(scenario, cals)
        if price is not None and price.currency != currency:
            # Never compare across currencies: show the variant without costs.
            error = (
                error or f"rate card for {gpu} is in {price.currency}, not {currency}"
            )
        columns.append(
            Column(
                key,
                label,
                dict(overrides),
                scenario,
                result,
                error,
                price,
                _cells(result, base_result, currency),
                result.warnings if result else (),
            )
        )
    rows = tuple(
        (metric, tuple(c.cells[i] for c in columns if c.cells))
        for i, metric in enumerate(METRICS)
    )
    check = None
    observed = today_.observed_blocks
    if observed and base_result is not None and base_result.num_gpu_blocks > 0:
        off = (base_result.num_gpu_blocks - observed) / observed
        check = (
            f"vLLM reported num_gpu_blocks={observed:,}; the model predicts "
            f"{base_result.num_gpu_blocks:,} for today's settings ({off:+.1%})"
        )
    return WhatIf(today_, tuple(columns), METRICS, rows, check)


# ---------------------------------------------------------------------------
# Chart data
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Curve:
    label: str
    batch: list[int]
    itl_ms: list[float]
    tokens_per_s: list[float]
    sla_ms: float
    chosen_batch: int


def throughput_curve(
    scenario: Scenario,
    result: Result,
    label: str,
    calibrations: Sequence[EngineCalibration] = (),
) -> Curve | None:
    """Throughput against ITL as the batch grows to what the KV cache admits.

    The engine picks the largest batch within the SLA; lifting the SLA and
    capping max_num_seqs at each batch size traces the whole curve with the
    same closed form (one vectorised call).
    """
    cap = int(min(result.max_concurrency, result.max_num_seqs))
    if cap < 1 or (not result.feasible and result.num_gpu_blocks <= 0):
        return None
    points = sorted(
        {
            *(int(b) for b in np.unique(np.geomspace(1, cap, 24).round())),
            cap,
            max(1, result.batch_size),
        }
    )
    base = adapters.scenario_to_dict(scenario)
    rows = [
        dict(base, max_num_seqs=b, itl_sla_ms=1e9, ttft_sla_ms=None) for b in points
    ]
    try:
        grid = capacity_engine.evaluate_grid(rows, calibrations=calibrations)
    except CapacityError:
        return None
    return Curve(
        label=label,
        batch=[int(b) for b in grid["batch_size"]],
        itl_ms=[float(v) for v in grid["itl_at_percentile_ms"]],
        tokens_per_s=[float(v) for v in grid["throughput_tokens_per_s"]],
        sla_ms=float(scenario.itl_sla_ms),
        chosen_batch=int(result.batch_size),
    )


@dataclass(frozen=True)
class MemoryBar:
    label: str
    total_gib: float
    weights_gib: float
    activation_gib: float  # peak activation + non-torch + CUDA graphs
    kv_gib: float
    free_gib: float


def memory_bar(scenario: Scenario, result: Result, label: str) -> MemoryBar | None:
    total = adapters.gpu_memory_bytes(scenario.gpu, scenario.mig_profile)
    if total is None:
        return None
    gib = 1024**3
    overhead = (
        result.activation_bytes + result.non_torch_bytes + result.cuda_graph_bytes
    )
    kv = max(result.kv_cache_memory_bytes, 0.0)
    used = result.weights_bytes + overhead + kv
    return MemoryBar(
        label=label,
        total_gib=total / gib,
        weights_gib=result.weights_bytes / gib,
        activation_gib=overhead / gib,
        kv_gib=kv / gib,
        free_gib=max(total - used, 0.0) / gib,
    )


def saved_scenarios(limit: int = 200) -> list[SavedScenario]:
    return list(
        SavedScenario.objects.select_related("deployment", "created_by")[:limit]
    )


# ---------------------------------------------------------------------------
# Simulation, MIG layouts, search
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Simulation:
    column: str
    rate_per_s: float  # per replica
    duration_s: float
    result: Any  # analytics.capacity.simulate.SimulationResult


MAX_SIMULATED_REQUESTS = 1500


def simulate_column(
    column: Column, calibrations: Sequence[EngineCalibration] = ()
) -> Simulation | str:
    """One replica under Poisson arrivals at its share of the target rate.

    The duration is bounded (at most ~1,500 requests, 120 s simulated) so the
    page answers in seconds; without a target it runs at 80% of capacity.
    """
    from analytics.capacity.simulate import poisson_arrivals, simulate

    scenario, result = column.scenario, column.result
    if scenario is None or result is None:
        return column.error or "this column has no scenario"
    if not result.feasible:
        return f"not simulated: {result.reason}"
    target = scenario.target_requests_per_s
    if target:
        rate = target / max(result.replicas, 1)
    else:
        rate = 0.8 * result.max_requests_per_s_within_sla
    if rate <= 0:
        return "not simulated: the replica serves no requests within the SLA"
    duration = float(min(120.0, max(10.0, MAX_SIMULATED_REQUESTS / rate)))
    try:
        model = capacity_engine.step_model(scenario, calibrations=calibrations)
        outcome = simulate(
            model,
            poisson_arrivals(rate, duration, seed=0),
            prompt_tokens=int(scenario.prompt_tokens),
            output_tokens=int(scenario.output_tokens),
            max_time_s=duration * 3,
        )
    except CapacityError as exc:
        return str(exc)
    return Simulation(column.key, rate, duration, outcome)


@dataclass(frozen=True)
class MigRow:
    deployment: str
    layout: str
    valid: bool
    reason: str | None
    placements: str
    instances: tuple[str, ...]
    requests_per_s: str
    idle_slices: int
    cost_per_hour: str
    cost_per_1k_requests: str
    best: bool = False


def mig_comparison(
    gpu: str,
    layouts: Sequence[Sequence[str]],
    deployments: Sequence[Deployment],
    *,
    now: datetime | None = None,
) -> tuple[list[MigRow], list[str]]:
    """Each deployment on each layout of ``gpu``: one replica per instance,
    the whole GPU paid for (idle slices are cost)."""
    from analytics.capacity.mig import compare_mig_layouts

    rows: list[MigRow] = []
    problems: list[str] = []
    price = gpu_hour_price(gpu_type=gpu, day=(now or timezone.now()).date())
    if price is None:
        problems.append(f"no rate card for {gpu}: costs not computed")
    for deployment in deployments:
        state = today(deployment, now=now)
        if state.scenario is None:
            problems.extend(f"{deployment.name}: {p}" for p in state.problems)
            continue
        base = adapters.scenario_with(
            state.scenario,
            {
                "gpu": gpu,
                "mig_profile": None,
                "tp": 1,
                "gpu_hour_price": float(price.per_gpu_hour) if price else None,
            },
        )
        try:
            reports = compare_mig_layouts(gpu, [list(x) for x in layouts], base)
        except CapacityError as exc:
            problems.append(f"{deployment.name}: {exc}")
            continue
        currency = price.currency if price else ""
        costs = [r.cost_per_1k_requests for r in reports if r.cost_per_1k_requests]
        cheapest = min(costs) if costs else None
        for report in reports:
            instances = tuple(
                f"{p.profile}@{p.start}: "
                + (
                    f"{r.max_requests_per_s_within_sla:,.2f} req/s, batch "
                    f"{r.batch_size}, {r.kv_cache_tokens:,} KV tokens"
                    if r.feasible
                    else f"does not run ({r.reason})"
                )
                for p, r in zip(report.placements, report.instances, strict=True)
            )
            rows.append(
                MigRow(
                    deployment=deployment.name,
                    layout=" + ".join(report.layout),
                    valid=report.valid,
                    reason=report.reason,
                    placements=", ".join(
                        f"{p.profile}@{p.start}" for p in report.placements
                    ),
                    instances=instances,
                    requests_per_s=f"{report.requests_per_s:,.2f}"
                    if report.valid
                    else DASH,
                    idle_slices=report.idle_compute_slices,
                    cost_per_hour=(
                        f"{currency} {report.gpu_cost_per_hour:,.2f}"
                        if report.valid and report.gpu_cost_per_hour is not None
                        else DASH
                    ),
                    cost_per_1k_requests=(
                        f"{currency} {report.cost_per_1k_requests:,.4f}"
                        if report.cost_per_1k_requests is not None
                        else DASH
                    ),
                    best=cheapest is not None
                    and report.cost_per_1k_requests == cheapest,
                )
            )
    return rows, problems


@dataclass(frozen=True)
class SearchOutcome:
    ranked: Any  # pandas.DataFrame
    infeasible: Any
    pareto: Any
    space: dict[str, list[Any]]
    problems: tuple[str, ...]
    currency: str = "USD"


def capacity_search(
    deployment: Deployment,
    space: Mapping[str, Sequence[Any]],
    *,
    objective: str,
    constraints: Mapping[str, float] | None = None,
    now: datetime | None = None,
) -> SearchOutcome:
    """The engine's search over ``space`` from today's configuration.

    The engine prices every row at the base scenario's $ per GPU-hour, so a
    space that spans GPU types is searched once per GPU with that GPU's rate
    card and the results merged (ranked again, Pareto front recomputed).
    """
    import pandas as pd

    from analytics.capacity.search import pareto_front, search

    state = today(deployment, now=now)
    problems = list(state.problems)
    empty = pd.DataFrame()
    if state.scenario is None:
        return SearchOutcome(
            empty, empty, empty, {k: list(v) for k, v in space.items()}, tuple(problems)
        )
    cals = stored_calibrations()
    gpus_in_space = list(space.get("gpu") or [state.scenario.gpu])
    rest = {k: list(v) for k, v in space.items() if k != "gpu"}
    ranked, infeasible = [], []
    for gpu in gpus_in_space:
        price = (
            state.price
            if gpu == state.scenario.gpu
            else gpu_hour_price(gpu_type=str(gpu), region=deployment.region)
        )
        changes: dict[str, Any] = {
            "gpu": gpu,
            "gpu_hour_price": float(price.per_gpu_hour) if price else None,
        }
        if gpu != state.scenario.gpu:
            changes["mig_profile"] = None
        if price is None:
            problems.append(f"no rate card for {gpu}: its rows have no cost")
        base = adapters.scenario_with(state.scenario, changes)
        try:
            found = search(
                rest or {"gpu": [gpu]},
                constraints,
                objective,
                base=base,
                calibrations=cals,
            )
        except CapacityError as exc:
            problems.append(str(exc))
            continue
        if len(found.ranked):
            ranked.append(found.ranked)
        if len(found.infeasible):
            infeasible.append(found.infeasible)
    ranked_frame = pd.concat(ranked, ignore_index=True) if ranked else empty
    if len(ranked_frame):
        ranked_frame = ranked_frame.sort_values("score", kind="mergesort").reset_index(
            drop=True
        )
    infeasible_frame = pd.concat(infeasible, ignore_index=True) if infeasible else empty
    front = empty
    if len(ranked_frame) and "cost_per_1k_requests" in ranked_frame:
        priced = ranked_frame.dropna(subset=["cost_per_1k_requests"])
        if len(priced):
            front = pareto_front(priced, "cost_per_1k_requests", "p95_latency_s")
    return SearchOutcome(
        ranked_frame,
        infeasible_frame,
        front,
        {k: list(v) for k, v in space.items()},
        tuple(problems),
        state.price.currency if state.price else "USD",
    )


def _fmt(value: Any, digits: int) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DASH
    return f"{number:,.{digits}f}" if math.isfinite(number) else DASH


def _config_text(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    parts = []
    for key in keys:
        value = row.get(key)
        if key == "mig_profile" and (value is None or value != value):
            value = "whole GPU"
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def search_rows(frame: Any, keys: Sequence[str], limit: int) -> list[dict[str, str]]:
    """Ranked or refused search rows as display strings."""
    out: list[dict[str, str]] = []
    if frame is None or not len(frame):
        return out
    for rank, (_, row) in enumerate(frame.head(limit).iterrows(), start=1):
        out.append(
            {
                "rank": str(rank),
                "config": _config_text(row, keys),
                "cost_per_1k_requests": _fmt(row.get("cost_per_1k_requests"), 4),
                "cost_per_1m_tokens": _fmt(row.get("cost_per_1m_tokens"), 4),
                "p95_latency_s": _fmt(row.get("p95_latency_s"), 2),
                "itl_ms": _fmt(row.get("itl_at_percentile_ms"), 1),
                "ttft_ms": _fmt(row.get("ttft_ms"), 0),
                "gpus": _fmt(row.get("gpus_needed"), 2),
                "rps": _fmt(row.get("max_requests_per_s_within_sla"), 2),
                "kv_tokens": _fmt(row.get("kv_cache_tokens"), 0),
                "score": _fmt(row.get("score"), 4),
                "calibration": str(row.get("calibration") or ""),
                "reason": str(row.get("reason") or ""),
            }
        )
    return out


def pareto_series(
    outcome: SearchOutcome, keys: Sequence[str]
) -> tuple[list[float], list[float], list[str], list[float], list[float], str]:
    ranked = outcome.ranked.dropna(subset=["cost_per_1k_requests"])
    front = outcome.pareto
    return (
        [float(v) for v in ranked["cost_per_1k_requests"]],
        [float(v) for v in ranked["p95_latency_s"]],
        [_config_text(r, keys) for _, r in ranked.iterrows()],
        [float(v) for v in front["cost_per_1k_requests"]],
        [float(v) for v in front["p95_latency_s"]],
        outcome.currency,
    )
