"""The capacity engine run for the pages: what-if columns, curves, MIG, search.

Everything here returns numbers (engine results, chart series, search frames);
display strings are built in ``tables.py``, and the reads it starts from are in
``selectors.py`` (views -> tables -> whatif -> selectors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from django.http import QueryDict
from django.utils import timezone

from analytics.capacity import engine as capacity_engine
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.engine import Result, Scenario
from analytics.capacity.errors import CapacityError
from analytics.capacity.refusals import RejectedShare
from analytics.capacity.search import pareto_front, ranked_order, search
from analytics.capacity.simulate import poisson_arrivals, simulate
from analytics.errors import InvalidInput
from costapp.capacity import adapters
from costapp.capacity.backtest import (
    WINDOW_DAYS,
    DeploymentBacktest,
    deployment_backtest,
    prompt_histogram,
)
from costapp.capacity.forms import VARIANT_KEYS, VariantForm, field_errors
from costapp.capacity.selectors import (
    Price,
    Today,
    deployment_today,
    gpu_hour_price,
    stored_calibrations,
)
from costapp.models import Deployment


@dataclass(frozen=True)
class Column:
    key: str  # "today", "a", "b", "c"
    label: str
    overrides: dict[str, Any]
    scenario: Scenario | None
    result: Result | None
    error: str | None = None
    price: Price | None = None
    warnings: tuple[str, ...] = ()

    @property
    def calibration_label(self) -> str:
        return self.result.calibration.label if self.result else ""


@dataclass(frozen=True)
class WhatIf:
    today: Today
    columns: tuple[Column, ...]  # today first, then the variants; empty without today
    currency: str = "USD"  # today's rate card; variants in another are not costed
    # The memory model's pool for today's settings: today itself runs on the
    # pool the engine reported, so this is the figure checked against it.
    modelled_blocks: int | None = None

    @property
    def base(self) -> Result | None:
        """Today's result, which the variants are compared with."""
        if self.columns and self.columns[0].key == "today":
            return self.columns[0].result
        return None


def _evaluate(
    scenario: Scenario, calibrations: Sequence[EngineCalibration]
) -> tuple[Result | None, str | None]:
    try:
        return capacity_engine.evaluate(scenario, calibrations=calibrations), None
    except (CapacityError, InvalidInput) as exc:
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
                base_result.warnings if base_result else (),
            )
        )
    modelled_blocks = _modelled_blocks(base, base_result, cals)
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
            scenario = adapters.scenario_changed(base, changes)
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
                result.warnings if result else (),
            )
        )
    return WhatIf(today_, tuple(columns), currency, modelled_blocks)


def _modelled_blocks(
    base: Scenario | None,
    result: Result | None,
    calibrations: Sequence[EngineCalibration],
) -> int | None:
    if base is None or result is None:
        return None
    if base.num_gpu_blocks_override is None:
        return result.num_gpu_blocks
    modelled, _ = _evaluate(
        adapters.scenario_with(base, {"num_gpu_blocks_override": None}), calibrations
    )
    return modelled.num_gpu_blocks if modelled else None


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
    # A configuration vLLM refuses to start serves nothing: never drawn, so it
    # cannot look like the best curve.
    if cap < 1 or not result.starts or result.num_gpu_blocks <= 0:
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
    except (CapacityError, InvalidInput):
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
    except (CapacityError, InvalidInput) as exc:
        return str(exc)
    return Simulation(column.key, rate, duration, outcome)


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
    state = deployment_today(deployment, now=now)
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
        if set(rest) & adapters.POOL_INPUTS:
            # Rows that change what the pool was profiled with: the model sizes it.
            changes["num_gpu_blocks_override"] = None
        if price is None:
            problems.append(f"no rate card for {gpu}: its rows have no cost")
        base = adapters.scenario_changed(state.scenario, changes)
        try:
            found = search(
                rest or {"gpu": [gpu]},
                constraints,
                objective,
                base=base,
                calibrations=cals,
            )
        except (CapacityError, InvalidInput) as exc:
            problems.append(str(exc))
            continue
        if len(found.ranked):
            ranked.append(found.ranked)
        if len(found.infeasible):
            infeasible.append(found.infeasible)
    ranked_frame = pd.concat(ranked, ignore_index=True) if ranked else empty
    if len(ranked_frame):
        # GPUs were searched one by one: ranked again, ties by the stated rule.
        ranked_frame = ranked_order(ranked_frame, ["gpu", *rest])
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


@dataclass(frozen=True)
class Computed:
    """A what-if as the page's query asks for it: the forms, the columns, the
    problems (a refused input, an engine refusal) as sentences."""

    state: Today
    forms: list[tuple[str, str, VariantForm]]
    whatif: WhatIf
    errors: list[str]


def whatif_compute(
    deployment: Deployment,
    data: QueryDict,
    *,
    calibrations: Sequence[EngineCalibration] | None = None,
) -> Computed:
    """Today and the variants the query ``data`` (``a-kv_dtype=fp8``, ...) asks for."""
    state = deployment_today(deployment)
    shown = {k: s.value for k, s in state.settings.items()}
    forms = [
        (key, label, VariantForm(data, prefix=key, today=shown))
        for key, label in VARIANT_KEYS
    ]
    errors: list[str] = []
    variants = []
    for key, label, form in forms:
        if not form.is_valid():
            errors.extend(field_errors(form, label))
            continue
        overrides = form.overrides()
        if overrides:
            variants.append((key, label, overrides))
    result = whatif(state, variants, calibrations=calibrations)
    for column in result.columns:
        if column.error:
            errors.append(f"{column.label} · {column.error}")
    return Computed(state, forms, result, errors)


@dataclass(frozen=True)
class WhatIfPage:
    computed: Computed
    curves: list[Curve]  # one per column the engine evaluated, when it has a curve
    bars: list[MemoryBar]
    calibrations: list[EngineCalibration]  # what the columns were evaluated with
    backtest: DeploymentBacktest | None = None  # today against its telemetry
    # Per column key: requests its max_model_len rejects, bounded by the prompt
    # histogram; None where the column has no max_model_len to check. Empty
    # when there is no prompt histogram (unknown, not "none rejected").
    rejected: dict[str, RejectedShare | None] | None = None


def rejected_shares(
    deployment: Deployment, columns: Sequence[Column], *, now: datetime | None = None
) -> dict[str, RejectedShare | None]:
    """Each column's max_model_len against the observed prompt lengths."""
    end = now or timezone.now()
    histogram = prompt_histogram(
        deployment, start=end - timedelta(days=WINDOW_DAYS), end=end
    )
    if histogram is None:
        return {}
    out: dict[str, RejectedShare | None] = {}
    for column in columns:
        limit = (
            adapters.effective_max_model_len(column.scenario)
            if column.scenario is not None
            else None
        )
        if column.scenario is None or limit is None:
            out[column.key] = None
            continue
        out[column.key] = histogram.rejected(
            int(limit), float(column.scenario.output_tokens)
        )
    return out


def whatif_page(deployment: Deployment, data: QueryDict) -> WhatIfPage:
    """The what-if page's figures: the columns, the curve and memory bar of each,
    today's back-test and each column's rejected share."""
    calibrations = stored_calibrations()
    computed = whatif_compute(deployment, data, calibrations=calibrations)
    curves, bars = [], []
    for column in computed.whatif.columns:
        if column.scenario is None or column.result is None:
            continue
        curve = throughput_curve(
            column.scenario, column.result, column.label, calibrations
        )
        if curve is not None:
            curves.append(curve)
        bar = memory_bar(column.scenario, column.result, column.label)
        if bar is not None:
            bars.append(bar)
    backtest = (
        deployment_backtest(deployment, calibrations=calibrations, today=computed.state)
        if computed.state.scenario is not None
        else None
    )
    rejected = rejected_shares(deployment, computed.whatif.columns)
    return WhatIfPage(computed, curves, bars, calibrations, backtest, rejected)
