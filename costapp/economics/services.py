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
from analytics.clocks import clock_costs, effective_rates
from analytics.lmdi import lmdi_aggregate
from analytics.unit_costs import unit_costs
from costapp.economics.selectors import (
    CLOCK_ORDER,
    RecomputeInputs,
    recompute_inputs_read,
    series_siblings,
)
from costapp.models import Budget, UnitCostFigure
from costapp.models.economics import FLEET

logger = logging.getLogger(__name__)

QUANTUM = Decimal("1e-12")
KEYS = ("scope", "name", "currency")
SUMMED = (
    "cost", "list_cost", "idle_cost", "unallocated_cost", "gpu_hours",
    "prompt_tokens", "generation_tokens", "requests", "requests_length",
)  # fmt: skip
FIGURE_COLUMNS = (
    *KEYS, "period_start", "clock", "rate_source", *SUMMED, "replicas",
    "effective_rate", "note",
)  # fmt: skip
NOTE_GPU_UNKNOWN = "GPU-hours unknown: no provisional cost"
NOTE_NO_RATE = "no rate card: no provisional cost"
NOTE_HOURLY_DIRECT = "direct cost only: idle and unallocated are known per day"
NOTE_NOT_BILLED = "idle and unallocated not billed yet"


@dataclass(frozen=True)
class RecomputeResult:
    since: date | None
    series: tuple[tuple[str, str], ...] | None  # (scope, name); None: all
    rows_written: int
    rows_deleted: int
    flagged: int


# --- frames -----------------------------------------------------------------------


def _sum_nan(frame: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    """Group sums where one missing member makes the sum missing (an unknown
    cost is not a zero cost)."""
    grouped = frame.groupby(by, sort=True, dropna=False)
    sums = grouped[columns].sum()
    unknown = frame[columns].isna().groupby([frame[k] for k in by], sort=True).any()
    return sums.mask(unknown.reindex(sums.index, fill_value=False))


def _rows(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate figure rows, leaving out empty frames (whose all-NaN
    columns would otherwise decide the dtypes)."""
    present = [f for f in frames if len(f)]
    if not present:
        return pd.DataFrame(columns=list(FIGURE_COLUMNS))
    return pd.concat(present, ignore_index=True)


def _worst_clock(values: pd.Series) -> str:
    present = [v for v in values if isinstance(v, str) and v]
    if not present:
        return "provisional"
    return min(present, key=lambda c: CLOCK_ORDER.get(c, 0))


def _one_or_mixed(values: pd.Series) -> str:
    distinct = {v for v in values if isinstance(v, str) and v}
    if len(distinct) == 1:
        return distinct.pop()
    return "mixed" if distinct else ""


def _deployment_days(inputs: RecomputeInputs) -> pd.DataFrame:
    """Per deployment, UTC day and currency: traffic summed from hours, the
    bill where one arrived, priced on the best clock (analytics.clocks)."""
    hours = inputs.hours
    by = ["deployment", "day", "currency"]
    traffic = ["requests", "requests_length", "prompt_tokens", "generation_tokens"]
    if len(hours):
        sums = _sum_nan(hours, by, [*traffic, "gpu_hours"])
        extra = hours.groupby(by, sort=True).agg(
            replicas=("replicas", "mean"), rate_card=("rate_card", "first")
        )
        days = sums.join(extra).reset_index()
    else:
        days = pd.DataFrame(
            columns=[*by, *traffic, "gpu_hours", "replicas", "rate_card"]
        )
    days = days.merge(inputs.bills, on=by, how="outer")
    meta = inputs.deployments.set_index("name")
    days["team"] = days["deployment"].map(meta["team"]).fillna("")
    days["pool"] = days["deployment"].map(meta["pool"]).fillna("")
    days["day"] = pd.DatetimeIndex(days["day"])
    days = days.sort_values(by).reset_index(drop=True)
    for name in (*traffic, "gpu_hours", "replicas", "rate_card", "bill_cost"):
        days[name] = pd.to_numeric(days[name], errors="coerce").astype(float)
    days["bill_status"] = days["bill_status"].fillna("")
    return days


def _priced(days: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    rates = effective_rates(days, keys=keys)
    priced = clock_costs(days, rates, keys=keys, time="day")
    return pd.concat([days, priced.drop(columns=["rate"])], axis=1)


def _notes(frame: pd.DataFrame) -> np.ndarray:
    gpu_missing = frame["gpu_hours"].isna().to_numpy()
    provisional = (frame["clock"] == "provisional").to_numpy()
    no_rate = (frame["rate_source"] == "none").to_numpy()
    return np.select(
        [provisional & gpu_missing, provisional & no_rate],
        [NOTE_GPU_UNKNOWN, NOTE_NO_RATE],
        "",
    )


def _as_figures(
    frame: pd.DataFrame, scope: str, name_column: str, time_column: str = "day"
) -> pd.DataFrame:
    out = pd.DataFrame(index=frame.index)
    out["scope"] = scope
    out["name"] = frame[name_column].astype(str)
    out["currency"] = frame["currency"]
    out["period_start"] = pd.DatetimeIndex(frame[time_column])
    for column in FIGURE_COLUMNS[4:]:
        if column in frame.columns:
            out[column] = frame[column]
        elif column in ("clock", "rate_source", "note"):
            out[column] = ""
        else:
            out[column] = np.nan
    return out


def _aggregate(parts: pd.DataFrame, scope: str, names: pd.Series) -> pd.DataFrame:
    """Sum figure rows into one series per name (team, fleet) and period."""
    f = parts.assign(_name=names.to_numpy())
    f = f[f["_name"].astype(str) != ""]
    by = ["_name", "currency", "period_start"]
    sums = _sum_nan(f, by, list(SUMMED))
    # Overheads carry no traffic: their NaN traffic must not blank a sum.
    traffic = ["gpu_hours", "prompt_tokens", "generation_tokens", "requests",
               "requests_length", "list_cost"]  # fmt: skip
    members = f[f["scope"] != "overhead"]
    if len(members):
        sums[traffic] = _sum_nan(members, by, traffic).reindex(sums.index)
        sums["replicas"] = members.groupby(by)["replicas"].sum(min_count=1)
    else:
        sums[traffic] = np.nan
        sums["replicas"] = np.nan
    for name in ("idle_cost", "unallocated_cost"):
        # Overheads are known only where billed; a team with no pool of its
        # own has none at all: 0 dollars of it, not an unknown amount.
        sums[name] = f.groupby(by)[name].sum(min_count=1)
    grouped = f.groupby(by, sort=True)
    sums["clock"] = grouped["clock"].agg(_worst_clock)
    sums["rate_source"] = grouped["rate_source"].agg(_one_or_mixed)
    sums["note"] = grouped["note"].agg(
        lambda v: "; ".join(sorted({x for x in v if isinstance(x, str) and x}))
    )
    sums = sums.reset_index().rename(columns={"_name": "name"})
    sums["scope"] = scope
    sums["effective_rate"] = np.nan
    return sums[list(FIGURE_COLUMNS)]


def figure_frames(inputs: RecomputeInputs) -> dict[str, pd.DataFrame]:
    """Every series' additive parts and clock, by grain (before detection)."""
    days = _deployment_days(inputs)
    dep = _priced(days, ["deployment", "currency"])
    dep["note"] = _notes(dep)
    deployment_rows = _as_figures(dep, "deployment", "deployment")

    # Pools are priced as one series: their whole bill (members + idle) over
    # the members' measured GPU-hours, so an unbilled day carries its idle at
    # the rate the bill showed instead of dropping it (a clock switch would
    # then look like a cost step).
    over = inputs.overheads
    idle = over[over["kind"] == "idle"].rename(columns={"amount": "idle_cost"})
    members = dep[dep["pool"] != ""]
    pool_rows = pd.DataFrame(columns=list(FIGURE_COLUMNS))
    if len(members):
        by = ["pool", "day", "currency"]
        pool = _sum_nan(
            members, by,
            ["gpu_hours", "requests", "requests_length", "prompt_tokens",
             "generation_tokens"],
        )  # fmt: skip
        pool["member_bill"] = members.groupby(by)["bill_cost"].sum(min_count=1)
        pool["billed_members"] = members.groupby(by)["bill_status"].agg(
            lambda v: _worst_clock(v) if all(v) else ""
        )
        pool["rate_card"] = members.groupby(by)["rate_card"].first()
        pool["replicas"] = members.groupby(by)["replicas"].sum(min_count=1)
        pool = pool.reset_index().merge(
            idle[[*by, "idle_cost", "bill_status"]], on=by, how="outer"
        )
        pool["bill_cost"] = pool["member_bill"].fillna(0.0) + pool["idle_cost"]
        pool["bill_cost"] = pool["bill_cost"].where(
            pool["member_bill"].notna() | pool["idle_cost"].notna()
        )
        pool["bill_status"] = [
            _worst_clock([a, b]) if isinstance(b, str) and b else (a or "")
            for a, b in zip(pool["billed_members"], pool["bill_status"], strict=True)
        ]
        pool["bill_status"] = pool["bill_status"].where(pool["bill_cost"].notna(), "")
        pool = pool.sort_values(by).reset_index(drop=True)
        pool = _priced(pool, ["pool", "currency"])
        pool["note"] = _notes(pool)
        pool_rows = _as_figures(pool, "pool", "pool")

    # Teams and the fleet sum deployments outside pools, whole pools where one
    # team owns all of it, members only where teams share it (its idle then
    # is the fleet's), and the unallocated bill (the fleet's).
    teams_of_pool = (
        inputs.deployments[inputs.deployments["pool"] != ""]
        .groupby("pool")["team"]
        .agg(lambda v: v.iloc[0] if v.nunique() == 1 else "")
    )
    solo = deployment_rows[dep["pool"].to_numpy() == ""]
    solo_teams = dep.loc[dep["pool"] == "", "team"]
    shared_pools = set(teams_of_pool[teams_of_pool == ""].index)
    shared_members = deployment_rows[dep["pool"].isin(shared_pools).to_numpy()]
    shared_teams = dep.loc[dep["pool"].isin(shared_pools), "team"]
    owned = pool_rows[~pool_rows["name"].isin(shared_pools)]
    owned_teams = owned["name"].map(teams_of_pool).fillna("")
    overhead = pool_rows[pool_rows["name"].isin(shared_pools)].copy()
    if len(overhead):
        # What the shared pool's bill holds beyond its members is its idle.
        member_cost = _sum_nan(
            shared_members.assign(pool=dep.loc[shared_members.index, "pool"]),
            ["pool", "currency", "period_start"], ["cost"],
        )  # fmt: skip
        joined = overhead.join(member_cost, on=["name", "currency", "period_start"],
                               rsuffix="_members")  # fmt: skip
        overhead["cost"] = joined["cost"] - joined["cost_members"]
    unalloc = over[over["kind"] == "unallocated"]
    unalloc_rows = pd.DataFrame(
        {
            "scope": "overhead", "name": "__unallocated__",
            "currency": unalloc["currency"], "period_start": unalloc["day"],
            "clock": unalloc["bill_status"], "rate_source": "bill",
            "cost": unalloc["amount"], "unallocated_cost": unalloc["amount"],
        }
    )  # fmt: skip
    overhead = overhead.assign(scope="overhead", list_cost=np.nan)
    team_parts = _rows([solo, owned, shared_members])
    names = [n for n in (solo_teams, owned_teams, shared_teams) if len(n)]
    team_names = (
        pd.concat(names, ignore_index=True) if names else pd.Series(dtype=object)
    )
    team_rows = _aggregate(team_parts, "team", team_names)
    fleet_parts = _rows([solo, owned, shared_members, overhead, unalloc_rows])
    for column in FIGURE_COLUMNS:
        if column not in fleet_parts:
            fleet_parts[column] = np.nan
    for column in ("clock", "rate_source", "note"):
        fleet_parts[column] = fleet_parts[column].fillna("")
    fleet_rows = _aggregate(
        fleet_parts, "fleet", pd.Series(FLEET, index=fleet_parts.index)
    )
    # Unbilled days carry no idle or unallocated line yet (pool idle is in
    # the pool's learnt rate; the unallocated bill is simply not there).
    unbilled = (fleet_rows["clock"] == "provisional").to_numpy()
    fleet_rows.loc[unbilled, "note"] = [
        "; ".join(x for x in (n, NOTE_NOT_BILLED) if x)
        for n in fleet_rows.loc[unbilled, "note"]
    ]
    day = _rows([deployment_rows, pool_rows, team_rows, fleet_rows])

    # Hours: always the provisional clock (the bill is daily), priced at the
    # deployment's learnt effective rate or the rate card.
    hours = inputs.hours
    if len(hours):
        rates = effective_rates(days, keys=["deployment", "currency"])
        priced = clock_costs(
            hours, rates, keys=["deployment", "currency"], time="period_start"
        )
        h = pd.concat([hours, priced.drop(columns=["rate"])], axis=1)
        h["note"] = _notes(h)
        h_rows = _as_figures(h, "deployment", "deployment", "period_start")
        h_teams = _aggregate(h_rows, "team", h["team"])
        h_fleet = _aggregate(h_rows, "fleet", pd.Series(FLEET, index=h_rows.index))
        h_fleet["note"] = NOTE_HOURLY_DIRECT
        h_teams["note"] = NOTE_HOURLY_DIRECT
        hour = _rows([h_rows, h_teams, h_fleet])
    else:
        hour = pd.DataFrame(columns=list(FIGURE_COLUMNS))
    members = _memberships(dep, deployment_rows, pool_rows, unalloc_rows,
                           teams_of_pool)  # fmt: skip
    return {"day": day, "hour": hour, "members": members}


MEMBER_COLUMNS = (
    "agg_scope", "agg_name", "currency", "period_start", "member", "cost",
    "gpu_hours", "tokens", "requests",
)  # fmt: skip


def _memberships(
    dep: pd.DataFrame,
    deployment_rows: pd.DataFrame,
    pool_rows: pd.DataFrame,
    unalloc_rows: pd.DataFrame,
    teams_of_pool: pd.Series,
) -> pd.DataFrame:
    """What each team and fleet day is made of, for the aggregate LMDI: every
    deployment's direct cost and traffic, each pool's overhead (its bill
    beyond its members: idle) and, for the fleet, the unallocated bill."""
    direct = deployment_rows.assign(
        member=deployment_rows["name"],
        tokens=deployment_rows["prompt_tokens"] + deployment_rows["generation_tokens"],
        team=dep["team"].to_numpy(),
        pool=dep["pool"].to_numpy(),
    )
    parts = []
    for scope in ("team", "fleet"):
        rows = direct if scope == "fleet" else direct[direct["team"] != ""]
        parts.append(rows.assign(agg_scope=scope,
                                 agg_name=rows["team"] if scope == "team" else FLEET))  # fmt: skip
    if len(pool_rows):
        member_cost = _sum_nan(
            direct[direct["pool"] != ""], ["pool", "currency", "period_start"], ["cost"]
        )
        joined = pool_rows.join(
            member_cost, on=["name", "currency", "period_start"], rsuffix="_members"
        )
        over = pool_rows.assign(
            member="__idle__/" + pool_rows["name"],
            cost=joined["cost"] - joined["cost_members"],
            gpu_hours=np.nan, tokens=np.nan, requests=np.nan,
        )  # fmt: skip
        parts.append(over.assign(agg_scope="fleet", agg_name=FLEET))
        owner = over["name"].map(teams_of_pool).fillna("")
        owned = over[owner.to_numpy() != ""]
        parts.append(owned.assign(agg_scope="team", agg_name=owner[owner != ""]))
    if len(unalloc_rows):
        parts.append(
            unalloc_rows.assign(
                member="__unallocated__", gpu_hours=np.nan, tokens=np.nan,
                requests=np.nan, agg_scope="fleet", agg_name=FLEET,
            )
        )  # fmt: skip
    present = [p[list(MEMBER_COLUMNS)] for p in parts if len(p)]
    if not present:
        return pd.DataFrame(columns=list(MEMBER_COLUMNS))
    return pd.concat(present, ignore_index=True)


def _affected(
    series: Iterable[str] | None, inputs: RecomputeInputs
) -> set[tuple[str, str]] | None:
    if series is None:
        return None
    names = series_siblings(series)
    meta = inputs.deployments.set_index("name")
    known = [n for n in names if n in meta.index]
    out = {("deployment", n) for n in known}
    out |= {("pool", p) for p in meta.loc[known, "pool"] if p}
    out |= {("team", t) for t in meta.loc[known, "team"] if t}
    out.add(("fleet", FLEET))
    return out


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
    det_input = pd.DataFrame(
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
        },
        index=frame.index,
    )
    config = BaselineConfig(grain="day" if grain == "day" else "hour")
    found = detect(det_input, keys=KEYS, time="period_start", config=config)
    # The baseline per 1M tokens: the same EWMA state, cost over tokens.
    state = baselines_run(det_input, keys=KEYS, time="period_start", config=config)
    per_token = unit_costs(
        pd.DataFrame(
            {
                "cost": state.figures["cost_b"].to_numpy(float),
                "tokens": state.figures["tokens_b"].to_numpy(float),
                "requests": state.figures["requests_b"].to_numpy(float),
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
    affected = _affected(series, inputs)
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
