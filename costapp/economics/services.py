"""Writes of unit economics: the stored figures and budgets.

``unit_costs_recompute`` feeds stored telemetry, the allocated bill and the
rate card to ``analytics`` (clocks, unit costs, baselines, explanations) and
stores what comes back; it does no arithmetic of its own beyond summing
additive parts into teams, pools and the fleet. It never queues anything
(import-linter: services never queue); ``economics.tasks`` does.

Series: ``deployment`` (direct: its allocated bill), ``pool`` (its whole bill:
members and ``__idle__``), ``team`` and ``fleet`` (fully loaded: a pool whose
members all belong to one team is that team's, idle included; the idle of a
pool shared by teams and the unallocated bill are the fleet's only).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.db import transaction
from django.db.models import Q

from analytics.anomalies import detect
from analytics.baselines import BaselineConfig, baselines_run
from analytics.lmdi import lmdi_aggregate
from analytics.unit_costs import unit_costs
from costapp.economics.frames import (
    KEYS,
    affected_series,
    figure_frames,
)
from costapp.economics.inputs import (
    recompute_inputs_read,
)
from costapp.models import Budget, UnitCostFigure

logger = logging.getLogger(__name__)

QUANTUM = Decimal("1e-12")


@dataclass(frozen=True)
class RecomputeResult:
    since: date | None
    series: tuple[tuple[str, str], ...] | None  # (scope, name); None: all
    rows_written: int
    rows_deleted: int
    flagged: int


# --- the recompute -----------------------------------------------------------------


def _money(value: float) -> Decimal | None:
    if value is None or not np.isfinite(value):
        return None
    return Decimal(repr(float(value))).quantize(QUANTUM)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    f = float(value)
    return f if np.isfinite(f) else None


def _detected(frame: pd.DataFrame, grain: str) -> pd.DataFrame:
    units = unit_costs(
        frame.assign(tokens=frame["prompt_tokens"] + frame["generation_tokens"])
    )
    det_input = _detect_input(frame)
    config = BaselineConfig(grain="day" if grain == "day" else "hour")
    found = detect(det_input, keys=KEYS, time="period_start", config=config)
    # The baseline per 1M tokens: the same EWMA state, cost over tokens.
    per_token = unit_costs(
        pd.DataFrame(
            {
                "cost": found["cost_b"].to_numpy(float),
                "tokens": found["tokens_b"].to_numpy(float),
                "requests": found["requests_b"].to_numpy(float),
            },
            index=frame.index,
        )
    )["cost_per_1m_tokens"].rename("baseline_per_1m_tokens")
    return pd.concat(
        [
            # The figure from unit_costs (a credit shows as a negative
            # figure); detect's u leaves non-positive costs out of the baseline.
            units[
                [
                    "cost_per_1k_requests",
                    "cost_per_1m_tokens",
                    "cost_per_gpu_hour",
                    "tokens_per_gpu_second",
                ]
            ],
            found[
                [
                    "baseline",
                    "lower",
                    "upper",
                    "flag",
                    "cause",
                    "price",
                    "fleet",
                    "traffic",
                    "size",
                    "cost",
                    "level_shift",
                    "warm",
                    "note",
                ]
            ].rename(columns={"cost": "cost_part", "note": "detect_note"}),
            per_token,
            # Team and fleet days get these from the aggregate LMDI.
            pd.DataFrame({"idle": np.nan, "mix": np.nan}, index=frame.index),
        ],
        axis=1,
    )


BASE_COLUMNS = ["cost_b", "gpu_hours_b", "tokens_b", "requests_b"]


def _detect_input(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "scope": frame["scope"].to_numpy(),
            "name": frame["name"].to_numpy(),
            "currency": frame["currency"].to_numpy(),
            "period_start": pd.DatetimeIndex(frame["period_start"]).as_unit("ns"),
            "cost": frame["cost"].to_numpy(float),
            "requests": frame["requests"].to_numpy(float),
            "gpu_hours": frame["gpu_hours"].to_numpy(float),
            "tokens": (frame["prompt_tokens"] + frame["generation_tokens"]).to_numpy(
                float
            ),
            # For the sentence only: the replicas the baseline implies.
            "replicas": pd.to_numeric(frame["replicas"], errors="coerce").to_numpy(
                float
            ),
        },
        index=frame.index,
    )


def _aggregate_parts(
    frame: pd.DataFrame,
    found: pd.DataFrame,
    members: pd.DataFrame,
    every: pd.DataFrame,
) -> None:
    """Replace the parts of flagged team and fleet days by the fully loaded
    decomposition (analytics.lmdi.lmdi_aggregate): the four factors over the
    deployments plus ``idle`` and ``mix``, against the aggregate's own
    baseline, still with no residual. Overheads (pool idle, unallocated) get
    their own baselines, as dollars over the aggregate's requests. ``every``
    is the whole day frame: members' baselines come from their own series
    whether or not this (incremental) recompute rewrites them."""
    flagged = (found["flag"] != "").to_numpy() & frame["scope"].isin(
        ["team", "fleet"]
    ).to_numpy()
    if not flagged.any() or members.empty:
        return
    config = BaselineConfig(grain="day")
    every = every.reset_index(drop=True)
    base = baselines_run(
        _detect_input(every), keys=KEYS, time="period_start", config=config
    ).figures
    comp = pd.concat([every[["scope", "name", "currency", "period_start"]],
                      base[BASE_COLUMNS]], axis=1)  # fmt: skip
    comp["period_start"] = pd.DatetimeIndex(comp["period_start"])
    m = members.copy()
    m["period_start"] = pd.DatetimeIndex(m["period_start"])
    # Deployments bring their own baseline components.
    dep_comp = comp[comp["scope"] == "deployment"].rename(columns={"name": "member"})
    m = m.merge(
        dep_comp.drop(columns=["scope"]),
        on=["member", "currency", "period_start"], how="left",
    )  # fmt: skip
    over = m["member"].astype(str).str.startswith("__").to_numpy()
    # Overheads: a series each, per aggregate, priced per aggregate request.
    agg = comp[comp["scope"].isin(["team", "fleet"])].rename(
        columns={"scope": "agg_scope", "name": "agg_name"}
    )
    requests = every[every["scope"].isin(["team", "fleet"])][
        ["scope", "name", "currency", "period_start", "requests"]
    ].rename(
        columns={"scope": "agg_scope", "name": "agg_name", "requests": "agg_requests"}
    )
    requests["period_start"] = pd.DatetimeIndex(requests["period_start"])
    overheads = m[over].merge(
        requests, on=["agg_scope", "agg_name", "currency", "period_start"], how="left"
    )
    if len(overheads):
        series = pd.DataFrame(
            {
                "scope": "overhead",
                "name": overheads["agg_scope"] + "/" + overheads["agg_name"] + "/"
                + overheads["member"],
                "currency": overheads["currency"].to_numpy(),
                "period_start": pd.DatetimeIndex(overheads["period_start"]).as_unit("ns"),
                "cost": overheads["cost"].to_numpy(float),
                "requests": overheads["agg_requests"].to_numpy(float),
            }
        )  # fmt: skip
        ob = baselines_run(series, keys=KEYS, time="period_start", config=config)
        m.loc[over, "cost_b"] = ob.figures["cost_b"].to_numpy()
    m["agg"] = m["agg_scope"] + "/" + m["agg_name"]
    agg["agg"] = agg["agg_scope"] + "/" + agg["agg_name"]
    rows = frame[flagged]
    wanted = set(zip(rows["scope"] + "/" + rows["name"],
                     pd.DatetimeIndex(rows["period_start"]), strict=True))  # fmt: skip
    pick = [(a, t) in wanted for a, t in zip(m["agg"], m["period_start"], strict=True)]
    sub = m[np.asarray(pick, dtype=bool)]
    if sub.empty:
        return
    totals = agg[["agg", "period_start", *BASE_COLUMNS]]
    parts = lmdi_aggregate(
        sub.drop(columns=["agg_scope", "agg_name"]),
        keys=["agg", "period_start"],
        member="member",
        baseline_totals=totals,
    ).set_index(["agg", "period_start"])
    for i in np.flatnonzero(flagged):
        key = (
            f"{frame['scope'].iat[i]}/{frame['name'].iat[i]}",
            pd.Timestamp(frame["period_start"].iat[i]),
        )
        if key not in parts.index:
            continue
        row = parts.loc[key]
        if row["reason"]:
            continue
        for name in ("price", "fleet", "traffic", "size", "cost", "idle", "mix"):
            column = "cost_part" if name == "cost" else name
            found.iat[i, found.columns.get_loc(column)] = row[name]


def _instances(
    frame: pd.DataFrame, found: pd.DataFrame, grain: str, now: datetime
) -> list[UnitCostFigure]:
    out = []
    merged = pd.concat([frame, found], axis=1)
    for r in merged.to_dict("records"):
        parts = {
            k: float(r[src])
            for k, src in (
                ("price", "price"),
                ("fleet", "fleet"),
                ("traffic", "traffic"),
                ("size", "size"),
                ("cost", "cost_part"),
                ("idle", "idle"),
                ("mix", "mix"),
            )
            if r[src] is not None and np.isfinite(r[src])
        }
        note = "; ".join(x for x in (r["note"], r["detect_note"]) if x)
        stamp = pd.Timestamp(r["period_start"]).to_pydatetime().replace(tzinfo=UTC)
        out.append(
            UnitCostFigure(
                scope=r["scope"], name=r["name"], grain=grain, period_start=stamp,
                currency=r["currency"], clock=r["clock"] or "provisional",
                rate_source=r["rate_source"] or "", cost=_money(r["cost"]),
                list_cost=_money(r["list_cost"]), idle_cost=_money(r["idle_cost"]),
                unallocated_cost=_money(r["unallocated_cost"]),
                gpu_hours=_num(r["gpu_hours"]),
                prompt_tokens=_num(r["prompt_tokens"]),
                generation_tokens=_num(r["generation_tokens"]),
                requests=_num(r["requests"]),
                requests_length=_num(r["requests_length"]),
                replicas=_num(r["replicas"]),
                cost_per_1k_requests=_num(r["cost_per_1k_requests"]),
                cost_per_1m_tokens=_num(r["cost_per_1m_tokens"]),
                cost_per_gpu_hour=_num(r["cost_per_gpu_hour"]),
                tokens_per_gpu_second=_num(r["tokens_per_gpu_second"]),
                effective_rate=_num(r["effective_rate"]),
                baseline=_num(r["baseline"]), lower=_num(r["lower"]),
                upper=_num(r["upper"]),
                baseline_per_1m_tokens=_num(r["baseline_per_1m_tokens"]), flag=r["flag"] or "", cause=r["cause"] or "",
                parts=parts, level_shift=bool(r["level_shift"]),
                warm=bool(r["warm"]), note=note[:300], computed_at=now,
            )
        )  # fmt: skip
    return out


def unit_costs_recompute(
    *,
    now: datetime,
    since: date | None = None,
    series: Iterable[str] | None = None,
    basis: str = "amortized",
) -> RecomputeResult:
    """Recompute and store the figures of ``series`` (deployment names; their
    pool siblings, pools, teams and the fleet follow) from ``since`` on.

    ``series=None`` means every series and ``since=None`` every day: the full
    recompute, the reference an incremental one must equal. Baselines carry
    state from the first day, so every series recomputed is computed over its
    whole history; only its rows from ``since`` on are written.
    """
    inputs = recompute_inputs_read(basis=basis)
    frames = figure_frames(inputs)
    affected = affected_series(series, inputs)
    cutoff = (
        pd.Timestamp(datetime.combine(since, time())) if since is not None else None
    )
    figures: list[UnitCostFigure] = []
    flagged = 0
    for grain in ("day", "hour"):
        frame = frames[grain]
        if affected is not None:
            mask = [
                (s, n) in affected
                for s, n in zip(frame["scope"], frame["name"], strict=True)
            ]
            frame = frame[np.asarray(mask, dtype=bool)]
        frame = frame.reset_index(drop=True)
        if frame.empty:
            continue
        found = _detected(frame, grain)
        if grain == "day":
            _aggregate_parts(frame, found, frames["members"], frames["day"])
        if cutoff is not None:
            keep = np.asarray(pd.DatetimeIndex(frame["period_start"]) >= cutoff)
            frame, found = frame[keep], found[keep]
        flagged += int((found["flag"] != "").sum())
        figures.extend(_instances(frame, found, grain, now))

    with transaction.atomic():
        doomed = UnitCostFigure.objects.all()
        if since is not None:
            doomed = doomed.filter(
                period_start__gte=datetime.combine(since, time(), tzinfo=UTC)
            )
        if affected is not None:
            match = Q(pk__in=[])
            for scope, name in sorted(affected):
                match |= Q(scope=scope, name=name)
            doomed = doomed.filter(match)
        deleted, _ = doomed.delete()
        UnitCostFigure.objects.bulk_create(figures, batch_size=2000)
    logger.info(
        "unit costs recomputed: %d rows (%d flagged), %d deleted, since %s",
        len(figures), flagged, deleted, since,
    )  # fmt: skip
    return RecomputeResult(
        since=since,
        series=tuple(sorted(affected)) if affected is not None else None,
        rows_written=len(figures),
        rows_deleted=deleted,
        flagged=flagged,
    )


# --- budgets -----------------------------------------------------------------------


def budget_upsert(
    *, scope: str, name: str, monthly_amount: Decimal, currency: str = "USD"
) -> Budget:
    budget, _ = Budget.objects.update_or_create(
        scope=scope,
        name=name,
        currency=currency,
        defaults={"monthly_amount": monthly_amount},
    )
    return budget


def budget_delete(*, pk: int) -> bool:
    deleted, _ = Budget.objects.filter(pk=pk).delete()
    return bool(deleted)
