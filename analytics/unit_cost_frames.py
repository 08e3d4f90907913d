"""The unit-cost recompute's frames: its inputs (hours, the allocated bill,
the rate card, as ``RecomputeInputs``) priced on the best clock
(``analytics.clocks``) and shaped into one row per series and period, summed
into pools, teams and the fleet, before detection
(``analytics.unit_cost_figures``).

Series: ``deployment`` (direct: its allocated bill), ``pool`` (its whole
bill: members and ``__idle__``), ``team`` and the fleet (fully loaded: a pool
whose members all belong to one team is that team's, idle included; the idle
of a pool shared by teams and the unallocated bill are the fleet's only). The
fleet's series name is the caller's (``fleet=``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analytics.clocks import CLOCK_ORDER, clock_costs, effective_rates
from analytics.known_prices import MARKS, known_price_marks

KEYS = ("scope", "name", "currency")
SUMMED = (
    "cost", "list_cost", "idle_cost", "unallocated_cost", "gpu_hours",
    "prompt_tokens", "generation_tokens", "requests", "requests_length",
)  # fmt: skip
FIGURE_COLUMNS = (
    *KEYS, "period_start", "clock", "rate_source", *SUMMED, "replicas",
    "effective_rate", "note",
)  # fmt: skip
# ``holiday`` is added per row once the series are known (holiday_marks), and
# the known price changes (analytics.known_prices.MARKS).
NOTE_GPU_UNKNOWN = "GPU-hours unknown: no provisional cost"
NOTE_NO_RATE = "no rate card: no provisional cost"
NOTE_HOURLY_DIRECT = "direct cost only: idle and unallocated are known per day"
NOTE_NOT_BILLED = "idle and unallocated not billed yet"


@dataclass(frozen=True)
class RecomputeInputs:
    """What the unit-cost recompute reads, as plain frames.

    ``hours``: one row per deployment and UTC hour with telemetry: deployment,
    team, pool, period_start, day, requests (stop + length), requests_length,
    prompt_tokens, generation_tokens, gpu_hours (NaN where the GPU-seconds are
    unknown), replicas, rate_card ($ per GPU-hour that day; NaN: none),
    currency (the rate card's), complete (read after it ended plus the settle
    delay).
    ``bills``: one row per deployment, UTC day and currency that received a
    share of the allocated bill: deployment, day, currency, bill_cost (float),
    bill_status (final / estimated), optionally recurring, lump and
    lump_amount (its price lines, ``analytics.known_prices``).
    ``overheads``: pool idle and unallocated dollars: pool ("" for
    unallocated), kind (idle / unallocated), day, currency, amount, bill_status.
    ``deployments``: name, team, pool.
    ``holidays``: team, day, name: the teams' calendars from the fleet file
    (``analytics.calendar.holiday_calendar``) over the inputs' days.
    """

    hours: pd.DataFrame
    bills: pd.DataFrame
    overheads: pd.DataFrame
    deployments: pd.DataFrame
    holidays: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["team", "day", "name"])
    )


def affected_series(
    names: Iterable[str] | None, deployments: pd.DataFrame, *, fleet: str
) -> set[tuple[str, str]] | None:
    """The (scope, name) series whose figures move with the deployments
    ``names`` (pool siblings included by the caller): theirs, their pools',
    their teams' and the fleet's. None (every series) for None."""
    if names is None:
        return None
    meta = deployments.set_index("name")
    known = [n for n in names if n in meta.index]
    out = {("deployment", n) for n in known}
    out |= {("pool", p) for p in meta.loc[known, "pool"] if p}
    out |= {("team", t) for t in meta.loc[known, "team"] if t}
    out.add(("fleet", fleet))
    return out


# --- sums and labels ----------------------------------------------------------------


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


def worst_clock(values: Iterable[object]) -> str:
    present = [v for v in values if isinstance(v, str) and v]
    if not present:
        return "provisional"
    return min(present, key=lambda c: CLOCK_ORDER.get(c, 0))


CLOCK_NAMES = {code: name for name, code in CLOCK_ORDER.items()}


def group_labels(frame: pd.DataFrame, keys: list[pd.Series]) -> pd.DataFrame:
    """Per group of ``frame`` by ``keys``: its worst clock (``worst_clock``),
    its one rate source or "mixed" and its distinct notes, sorted and joined.
    Vectorized: a Python function per group of an hourly fleet frame took
    seconds every recompute."""
    index = frame.groupby(keys, sort=True).size().index

    def present(column: str) -> pd.Series:
        values = frame[column]
        text = values.to_numpy(dtype=object)
        return values.where(values.notna().to_numpy() & (text != ""))

    clocks = present("clock").map(CLOCK_ORDER)
    worst = clocks.groupby(keys, sort=True).min().reindex(index)
    sources = present("rate_source").groupby(keys, sort=True)
    distinct = sources.nunique().reindex(index, fill_value=0)
    first = sources.first().reindex(index)
    notes = present("note")
    some = notes.notna().to_numpy()
    joined = (
        notes[some]
        .groupby([k[some] for k in keys], sort=True)
        .agg(lambda v: "; ".join(sorted(set(v))))
        .reindex(index)
        if some.any()
        else pd.Series(np.nan, index=index)
    )
    return pd.DataFrame(
        {
            "clock": [
                "provisional" if pd.isna(c) else CLOCK_NAMES[int(c)] for c in worst
            ],
            "rate_source": np.where(
                distinct.to_numpy() == 1,
                first.to_numpy(dtype=object),
                np.where(distinct.to_numpy() > 1, "mixed", ""),
            ),
            "note": joined.fillna("").to_numpy(dtype=object),
        },
        index=index,
    )


# --- deployments and pools, priced ----------------------------------------------------


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
    # The bill's price lines are read apart (analytics.known_prices).
    bills = inputs.bills[[*by, "bill_cost", "bill_status"]]
    days = days.merge(bills, on=by, how="outer")
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
    labels = group_labels(f, [f[k] for k in by])
    sums["clock"] = labels["clock"]
    sums["rate_source"] = labels["rate_source"]
    sums["note"] = labels["note"]
    sums = sums.reset_index().rename(columns={"_name": "name"})
    sums["scope"] = scope
    sums["effective_rate"] = np.nan
    return sums[list(FIGURE_COLUMNS)]


def _pool_rows(dep: pd.DataFrame, overheads: pd.DataFrame) -> pd.DataFrame:
    """Pools priced as one series: their whole bill (members + idle) over the
    members' measured GPU-hours, so an unbilled day carries its idle at the
    rate the bill showed instead of dropping it (a clock switch would then
    look like a cost step)."""
    idle = overheads[overheads["kind"] == "idle"].rename(
        columns={"amount": "idle_cost"}
    )
    members = dep[dep["pool"] != ""]
    if not len(members):
        return pd.DataFrame(columns=list(FIGURE_COLUMNS))
    by = ["pool", "day", "currency"]
    pool = _sum_nan(
        members, by,
        ["gpu_hours", "requests", "requests_length", "prompt_tokens",
         "generation_tokens"],
    )  # fmt: skip
    pool["member_bill"] = members.groupby(by)["bill_cost"].sum(min_count=1)
    pool["billed_members"] = members.groupby(by)["bill_status"].agg(
        lambda v: worst_clock(v) if all(v) else ""
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
        worst_clock([a, b]) if isinstance(b, str) and b else (a or "")
        for a, b in zip(pool["billed_members"], pool["bill_status"], strict=True)
    ]
    pool["bill_status"] = pool["bill_status"].where(pool["bill_cost"].notna(), "")
    pool = pool.sort_values(by).reset_index(drop=True)
    pool = _priced(pool, ["pool", "currency"])
    pool["note"] = _notes(pool)
    return _as_figures(pool, "pool", "pool")


def _pool_owners(deployments: pd.DataFrame) -> pd.Series:
    """Per pool: the one team all its members belong to, or "" (shared)."""
    return (
        deployments[deployments["pool"] != ""]
        .groupby("pool")["team"]
        .agg(lambda v: v.iloc[0] if v.nunique() == 1 else "")
    )


def _unallocated_rows(overheads: pd.DataFrame) -> pd.DataFrame:
    unalloc = overheads[overheads["kind"] == "unallocated"]
    return pd.DataFrame(
        {
            "scope": "overhead", "name": "__unallocated__",
            "currency": unalloc["currency"], "period_start": unalloc["day"],
            "clock": unalloc["bill_status"], "rate_source": "bill",
            "cost": unalloc["amount"], "unallocated_cost": unalloc["amount"],
        }
    )  # fmt: skip


# --- teams and the fleet ------------------------------------------------------------


def _team_and_fleet_rows(
    dep: pd.DataFrame,
    deployment_rows: pd.DataFrame,
    pool_rows: pd.DataFrame,
    unalloc_rows: pd.DataFrame,
    owners: pd.Series,
    *,
    fleet: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Teams and the fleet sum deployments outside pools, whole pools where
    one team owns all of it, members only where teams share it (its idle
    then is the fleet's), and the unallocated bill (the fleet's)."""
    solo = deployment_rows[dep["pool"].to_numpy() == ""]
    solo_teams = dep.loc[dep["pool"] == "", "team"]
    shared_pools = set(owners[owners == ""].index)
    shared_members = deployment_rows[dep["pool"].isin(shared_pools).to_numpy()]
    shared_teams = dep.loc[dep["pool"].isin(shared_pools), "team"]
    owned = pool_rows[~pool_rows["name"].isin(shared_pools)]
    owned_teams = owned["name"].map(owners).fillna("")
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
        fleet_parts, "fleet", pd.Series(fleet, index=fleet_parts.index)
    )
    # Unbilled days carry no idle or unallocated line yet (pool idle is in
    # the pool's learnt rate; the unallocated bill is simply not there).
    unbilled = (fleet_rows["clock"] == "provisional").to_numpy()
    fleet_rows.loc[unbilled, "note"] = [
        "; ".join(x for x in (n, NOTE_NOT_BILLED) if x)
        for n in fleet_rows.loc[unbilled, "note"]
    ]
    return team_rows, fleet_rows


def _hour_rows(hours: pd.DataFrame, days: pd.DataFrame, *, fleet: str) -> pd.DataFrame:
    """Hours: always the provisional clock (the bill is daily), priced at the
    deployment's learnt effective rate or the rate card."""
    if not len(hours):
        return pd.DataFrame(columns=list(FIGURE_COLUMNS))
    rates = effective_rates(days, keys=["deployment", "currency"])
    priced = clock_costs(
        hours, rates, keys=["deployment", "currency"], time="period_start"
    )
    h = pd.concat([hours, priced.drop(columns=["rate"])], axis=1)
    h["note"] = _notes(h)
    h_rows = _as_figures(h, "deployment", "deployment", "period_start")
    h_teams = _aggregate(h_rows, "team", h["team"])
    h_fleet = _aggregate(h_rows, "fleet", pd.Series(fleet, index=h_rows.index))
    h_fleet["note"] = NOTE_HOURLY_DIRECT
    h_teams["note"] = NOTE_HOURLY_DIRECT
    return _rows([h_rows, h_teams, h_fleet])


def figure_frames(inputs: RecomputeInputs, *, fleet: str) -> dict[str, pd.DataFrame]:
    """Every series' additive parts and clock, by grain (before detection):
    ``day`` and ``hour`` rows of ``FIGURE_COLUMNS`` and ``holiday``, and
    ``members``, what each team and fleet day is made of (``_memberships``)."""
    days = _deployment_days(inputs)
    dep = _priced(days, ["deployment", "currency"])
    dep["note"] = _notes(dep)
    deployment_rows = _as_figures(dep, "deployment", "deployment")
    pool_rows = _pool_rows(dep, inputs.overheads)
    owners = _pool_owners(inputs.deployments)
    unalloc_rows = _unallocated_rows(inputs.overheads)
    team_rows, fleet_rows = _team_and_fleet_rows(
        dep, deployment_rows, pool_rows, unalloc_rows, owners, fleet=fleet
    )
    day = _rows([deployment_rows, pool_rows, team_rows, fleet_rows])
    hour = _hour_rows(inputs.hours, days, fleet=fleet)
    members = _memberships(dep, deployment_rows, pool_rows, unalloc_rows, owners,
                           fleet=fleet)  # fmt: skip
    for frame in (day, hour):
        frame["holiday"] = holiday_marks(
            frame, inputs.holidays, inputs.deployments, fleet=fleet
        )
    # The bill's lines are daily: hours see the clock and the rates only.
    for frame, bills in ((day, inputs.bills), (hour, inputs.bills.iloc[:0])):
        marks = known_price_marks(frame, bills, inputs.deployments, fleet=fleet)
        for name in MARKS:
            frame[name] = marks[name].to_numpy()
    return {"day": day, "hour": hour, "members": members}


def holiday_marks(
    frame: pd.DataFrame,
    holidays: pd.DataFrame,
    deployments: pd.DataFrame,
    *,
    fleet: str,
) -> np.ndarray:
    """Per figure row: its UTC day is a holiday of every team in its series (a
    deployment's team; the team; a pool's members' teams; every team for the
    fleet). A pool shared by a team on holiday and one at work is not on
    holiday: its traffic did not all dip."""
    if frame.empty or holidays is None or holidays.empty:
        return np.zeros(len(frame), dtype=bool)
    dep = deployments[deployments["team"] != ""]
    teams = sorted(set(dep["team"]))
    pairs = [
        ("deployment", n, t) for n, t in zip(dep["name"], dep["team"], strict=True)
    ]
    pairs += [("team", t, t) for t in teams]
    pairs += [
        ("pool", p, t) for p, t in zip(dep["pool"], dep["team"], strict=True) if p
    ]
    pairs += [("fleet", fleet, t) for t in teams]
    series_teams = pd.DataFrame(
        pairs, columns=["scope", "name", "team"]
    ).drop_duplicates()
    n_teams = series_teams.groupby(["scope", "name"]).size().rename("n_teams")
    days = pd.DatetimeIndex(frame["period_start"]).normalize()
    rows = pd.DataFrame(
        {"scope": frame["scope"].to_numpy(), "name": frame["name"].to_numpy(),
         "day": days}
    ).drop_duplicates()  # fmt: skip
    off = set(
        zip(
            holidays["team"].astype(str), pd.DatetimeIndex(holidays["day"]), strict=True
        )
    )
    joined = rows.merge(series_teams, on=["scope", "name"])
    joined["off"] = [
        (t, d) in off for t, d in zip(joined["team"], joined["day"], strict=True)
    ]
    counted = joined.groupby(["scope", "name", "day"])["off"].sum()
    counted = counted.to_frame().join(n_teams, on=["scope", "name"])
    on_holiday = counted.index[counted["off"] == counted["n_teams"]]
    keys = pd.MultiIndex.from_arrays(
        [frame["scope"].to_numpy(), frame["name"].to_numpy(), days]
    )
    return np.asarray(keys.isin(on_holiday))


MEMBER_COLUMNS = (
    "agg_scope", "agg_name", "currency", "period_start", "member", "cost",
    "gpu_hours", "tokens", "requests",
)  # fmt: skip


def _memberships(
    dep: pd.DataFrame,
    deployment_rows: pd.DataFrame,
    pool_rows: pd.DataFrame,
    unalloc_rows: pd.DataFrame,
    owners: pd.Series,
    *,
    fleet: str,
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
                                 agg_name=rows["team"] if scope == "team" else fleet))  # fmt: skip
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
        parts.append(over.assign(agg_scope="fleet", agg_name=fleet))
        owner = over["name"].map(owners).fillna("")
        owned = over[owner.to_numpy() != ""]
        parts.append(owned.assign(agg_scope="team", agg_name=owner[owner != ""]))
    if len(unalloc_rows):
        parts.append(
            unalloc_rows.assign(
                member="__unallocated__", gpu_hours=np.nan, tokens=np.nan,
                requests=np.nan, agg_scope="fleet", agg_name=fleet,
            )
        )  # fmt: skip
    present = [p[list(MEMBER_COLUMNS)] for p in parts if len(p)]
    if not present:
        return pd.DataFrame(columns=list(MEMBER_COLUMNS))
    return pd.concat(present, ignore_index=True)
