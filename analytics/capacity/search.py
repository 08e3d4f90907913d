"""Search a configuration space: ranked feasible configurations, the reasons the
others fail (vLLM's own words where vLLM refuses them: ``starts`` False), and the
Pareto front of cost against latency."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity.calibration_types import Calibration
from analytics.capacity.engine import Scenario, evaluate_grid
from analytics.errors import InvalidInput


def p95_latency_s(frame: pd.DataFrame) -> pd.Series:
    """End-to-end latency of a request at the SLA percentile step time."""
    return (
        frame["ttft_ms"] + frame["output_tokens"] * frame["itl_at_percentile_ms"]
    ) / 1e3


def seed_weighted_objective(frame: pd.DataFrame) -> pd.Series:
    """The playbook's score (seed 4.4): lower is better."""
    return (
        0.6 * p95_latency_s(frame)
        + 0.3 * frame["gpu_memory_gb"] / 40.0
        + 0.1 * frame["cost_per_1k_requests"] / 1.5
    )


OBJECTIVES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "cost_per_1k_requests": lambda f: f["cost_per_1k_requests"],
    "cost_per_1m_tokens": lambda f: f["cost_per_1m_tokens"],
    "p95_latency_s": p95_latency_s,
    "seed_weighted": seed_weighted_objective,
}

CONSTRAINTS = {
    "max_ttft_ms": ("ttft_ms", "le"),
    "max_itl_ms": ("itl_at_percentile_ms", "le"),
    "max_gpus": ("gpus_needed", "le"),
    "max_gpu_memory_gb": ("gpu_memory_gb", "le"),
    "max_cost_per_1k_requests": ("cost_per_1k_requests", "le"),
    "min_requests_per_s": ("max_requests_per_s_within_sla", "ge"),
}


# Equal scores are common (a cost objective on configurations that differ only
# in a setting that does not move cost): they are ordered by these, then by
# the configuration's own values as written, never by evaluation order.
TIE_ORDER = ("cost_per_1k_requests", "p95_latency_s", "gpus_needed")


def ranked_order(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """``frame`` by score, ties by ``TIE_ORDER`` then the ``keys`` values."""
    if not len(frame):
        return frame.reset_index(drop=True)
    # Each setting in its own order: numbers as numbers (64 before 128), the
    # rest as text (a missing MIG profile, None, as "None").
    tie_keys = {f"_key{i}": _sortable(frame[k]) for i, k in enumerate(keys)}
    by = ["score", *(c for c in TIE_ORDER if c in frame.columns), *tie_keys]
    return (
        frame.assign(**tie_keys)
        .sort_values(by, kind="mergesort", na_position="last")
        .drop(columns=list(tie_keys))
        .reset_index(drop=True)
    )


def _sortable(column: pd.Series) -> pd.Series:
    numbers = pd.to_numeric(column, errors="coerce")
    if numbers.notna().sum() == column.notna().sum():
        return numbers
    return column.astype(str)


@dataclass(frozen=True)
class SearchResult:
    ranked: pd.DataFrame
    infeasible: pd.DataFrame
    pareto: pd.DataFrame


def pareto_front(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows no other row beats on both x and y (lower is better on both)."""
    ordered = frame.sort_values([x, y], kind="mergesort")
    best = np.inf
    keep = []
    for idx, value in zip(ordered.index, ordered[y], strict=True):
        if value < best:
            keep.append(idx)
            best = value
    return ordered.loc[keep]


def search(
    space: Mapping[str, Sequence[Any]],
    constraints: Mapping[str, float] | None = None,
    objective: str | Callable[[pd.DataFrame], pd.Series] = "cost_per_1k_requests",
    *,
    base: Scenario,
    calibrations: Sequence[Calibration] = (),
) -> SearchResult:
    names = {f.name for f in fields(Scenario)}
    for key in space:
        if key not in names:
            raise InvalidInput(f"space.{key}", list(space[key]), "not a scenario field")
    constraints = dict(constraints or {})
    for key in constraints:
        if key not in CONSTRAINTS:
            raise InvalidInput(
                f"constraints.{key}", constraints[key], f"known: {sorted(CONSTRAINTS)}"
            )
    if isinstance(objective, str):
        if objective not in OBJECTIVES:
            raise InvalidInput("objective", objective, f"known: {sorted(OBJECTIVES)}")
        score_fn = OBJECTIVES[objective]
    else:
        score_fn = objective
    base_row = {f.name: getattr(base, f.name) for f in fields(Scenario)}
    keys = list(space)
    rows = [
        dict(base_row, **dict(zip(keys, combo, strict=True)))
        for combo in itertools.product(*(space[k] for k in keys))
    ]
    frame = pd.DataFrame(rows)
    # Points vLLM refuses (TP 3 on 32 heads, TP on MIG, max_model_len above the
    # model's or the pool's) come back with starts False and vLLM's reason.
    result = evaluate_grid(frame, calibrations=calibrations)
    result["p95_latency_s"] = p95_latency_s(result)
    ok = result["feasible"].to_numpy(bool)
    for name, limit in constraints.items():
        column, op = CONSTRAINTS[name]
        values = result[column].to_numpy(float)
        passes = values <= limit if op == "le" else values >= limit
        failed = ok & ~passes
        result.loc[failed, "reason"] = f"constraint {name}={limit} not met"
        ok &= passes
    result["feasible"] = ok
    result["score"] = score_fn(result)
    feasible = ranked_order(result[ok & result["score"].notna()], keys)
    infeasible = result[~ok].reset_index(drop=True)
    front = (
        pareto_front(
            feasible.dropna(subset=["cost_per_1k_requests"]),
            "cost_per_1k_requests",
            "p95_latency_s",
        )
        if len(feasible)
        else feasible
    )
    return SearchResult(feasible.reset_index(drop=True), infeasible, front)
