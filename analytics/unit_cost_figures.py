"""The unit-cost recompute's arithmetic: from its inputs to finished figures.

``figures_compute`` is the one call: the recompute's inputs
(``analytics.unit_cost_frames.RecomputeInputs``) in; out, per grain (day,
week, month, hour), one row per figure with every column costapp stores, and
the baselines' states to save. It mutates nothing it is given. For each
detected grain (days, hours) the story is:

1. the series the recompute rewrites (a deployment's pool siblings, pools,
   teams and the fleet follow it; ``affected_series``);
2. from a saved baseline state where one is usable (``resumable``), else
   from the first period: the baselines carry state from the first day;
3. unit costs, baselines, flags and explanations (``_detected``);
4. days only: flagged team and fleet days get the fully loaded LMDI parts
   (``_aggregate_parts``), and days roll up into weeks and months
   (``_rolled_up``);
5. only periods from the cutoff on are kept (a week or a month holding it is
   rewritten whole); each is complete or not (``completeness``), and one in
   progress is shown, never judged (``_finished``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analytics.anomalies import TOKEN_BAND, detect_run
from analytics.baselines import BaselineState, baselines_run
from analytics.known_prices import MARKS
from analytics.lmdi import lmdi_aggregate
from analytics.price_events import PRICE
from analytics.unit_cost_frames import (
    KEYS,
    RecomputeInputs,
    affected_series,
    figure_frames,
    group_labels,
)
from analytics.unit_cost_resume import (
    DETECTED_GRAINS,
    ROLLED_GRAINS,
    baseline_config,
    checkpoint_days,
    first_rewritten,
    resumable,
    series_keys,
)
from analytics.unit_costs import MIN_TOKENS, period_of, rollup, unit_costs

# The columns of a finished figure, as costapp stores them (UnitCostFigure):
# dollars (Decimal there), other numbers, and the rest as they are.
MONEY_COLUMNS = ("cost", "list_cost", "idle_cost", "unallocated_cost")
NUMBER_COLUMNS = (
    "gpu_hours", "prompt_tokens", "generation_tokens", "requests",
    "requests_length", "replicas", "cost_per_1k_requests", "cost_per_1m_tokens",
    "cost_per_gpu_hour", "tokens_per_gpu_second", "effective_rate", "baseline",
    "lower", "upper", *TOKEN_BAND,
)  # fmt: skip
UNIT_COLUMNS = ("cost_per_1k_requests", "cost_per_1m_tokens", "cost_per_gpu_hour",
                "tokens_per_gpu_second")  # fmt: skip
# The stored LMDI parts and their columns in the detection output.
PART_COLUMNS = {"price": "price", "fleet": "fleet", "traffic": "traffic",
                "size": "size", "cost": "cost_part", "idle": "idle", "mix": "mix"}  # fmt: skip
BASE_COLUMNS = ["cost_b", "gpu_hours_b", "tokens_b", "requests_b"]
NOTE_OPEN = "partial: not closed yet, not judged"
NOTE_PARTIAL = "partial: {days} of {length} days"
ROLLED = ["cost", "gpu_hours", "prompt_tokens", "generation_tokens", "requests",
          "requests_length"]  # fmt: skip
# Known only where billed: a period sums the days that have them.
ROLLED_KNOWN = ["list_cost", "idle_cost", "unallocated_cost", "replicas"]


@dataclass(frozen=True)
class SavedStates:
    """One detected grain's baseline states to save: the day the run resumed
    from (None: from the first day) and the states at each checkpoint day."""

    resumed_at: pd.Timestamp | None
    states: dict[pd.Timestamp, BaselineState]


@dataclass(frozen=True)
class FiguresComputed:
    """``figures``: per grain (day, week, month, hour; absent where no series
    of the recompute has days, or hours), one row per figure: ``scope, name, grain, period_start``
    (naive UTC), ``currency, clock, rate_source``, ``MONEY_COLUMNS`` and
    ``NUMBER_COLUMNS`` (NaN: missing), ``flag, cause, parts`` (a dict of the
    finite LMDI parts), ``level_shift, warm, note, complete``.
    ``states``: per detected grain run. ``series``: the (scope, name) series
    rewritten, None for all. ``flagged``: complete figures with a flag."""

    figures: dict[str, pd.DataFrame]
    states: dict[str, SavedStates]
    series: set[tuple[str, str]] | None
    flagged: int


# --- the rows each step works on ---------------------------------------------------


def _of_series(
    frame: pd.DataFrame, affected: set[tuple[str, str]] | None
) -> pd.DataFrame:
    if affected is not None:
        mask = [
            (s, n) in affected
            for s, n in zip(frame["scope"], frame["name"], strict=True)
        ]
        frame = frame[np.asarray(mask, dtype=bool)]
    return frame.reset_index(drop=True)


def _from_day(frame: pd.DataFrame, day: pd.Timestamp) -> pd.DataFrame:
    keep = pd.DatetimeIndex(frame["period_start"]) >= day
    return frame[np.asarray(keep)].reset_index(drop=True)


def _from_period(
    frame: pd.DataFrame, found: pd.DataFrame, first: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame]:
    keep = np.asarray(pd.DatetimeIndex(frame["period_start"]) >= first)
    return frame[keep], found[keep]


# --- detection ----------------------------------------------------------------------


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
            # Held out of the baselines; a traffic move on one is a dip.
            "holiday": frame["holiday"].to_numpy(bool)
            if "holiday" in frame
            else np.zeros(len(frame), dtype=bool),
            # A fall is a saving on a final bill, data to check on any other.
            "final": (frame["clock"] == "final").to_numpy(bool),
            # Known price changes and one-off amounts (analytics.price_events).
            **{m: frame[m].to_numpy() for m in MARKS if m in frame},
            # For the sentence only: the replicas the baseline implies.
            "replicas": pd.to_numeric(frame["replicas"], errors="coerce").to_numpy(
                float
            ),
        },
        index=frame.index,
    )


def _detected(
    frame: pd.DataFrame,
    grain: str,
    *,
    initial: BaselineState | None = None,
    checkpoints: list[pd.Timestamp] | None = None,
    complete: np.ndarray | None = None,
) -> tuple[pd.DataFrame, dict[pd.Timestamp, BaselineState]]:
    """``complete``: per row, whether its period has closed (``completeness``;
    None: all have): one in progress settles no run of its neighbours."""
    units = unit_costs(
        frame.assign(tokens=frame["prompt_tokens"] + frame["generation_tokens"])
    )
    found, states = detect_run(
        _detect_input(frame).assign(
            in_progress=False if complete is None else ~np.asarray(complete)
        ),
        keys=KEYS, time="period_start",
        config=baseline_config(grain), initial=initial, checkpoints=checkpoints or [],
    )  # fmt: skip
    # The band per 1M tokens: the same EWMA state, cost over tokens (missing
    # where the baseline's tokens are under the minimum volume, as the figure).
    few = ~(found["tokens_b"].to_numpy(float) >= MIN_TOKENS)
    per_token = pd.DataFrame(
        {c: np.where(few, np.nan, found[c].to_numpy(float)) for c in TOKEN_BAND},
        index=found.index,
    )
    detected = ["baseline", "lower", "upper", "flag", "cause", "price", "fleet",
                "traffic", "size", "cost", "level_shift", "warm", "note", "cost_b",
                "tokens_b", "requests_b"]  # fmt: skip
    return pd.concat(
        [
            # The figure from unit_costs (a credit shows as a negative
            # figure); detect's u leaves non-positive costs out of the baseline.
            units[list(UNIT_COLUMNS)],
            found[detected].rename(
                columns={"cost": "cost_part", "note": "detect_note"}
            ),
            per_token,
            # Team and fleet days get these from the aggregate LMDI.
            pd.DataFrame({"idle": np.nan, "mix": np.nan}, index=frame.index),
        ],
        axis=1,
    ), states


# --- the fully loaded parts of team and fleet days ----------------------------------


def _aggregate_parts(
    frame: pd.DataFrame,
    found: pd.DataFrame,
    members: pd.DataFrame,
    every: pd.DataFrame,
    initial: BaselineState | None = None,
) -> pd.DataFrame:
    """``found`` with the parts of flagged team and fleet days replaced by the
    fully loaded decomposition (analytics.lmdi.lmdi_aggregate): the four
    factors over the deployments plus ``idle`` and ``mix``, against the
    aggregate's own baseline, still with no residual. Overheads (pool idle,
    unallocated) get their own baselines, as dollars over the aggregate's
    requests. ``every`` is the whole day frame: members' baselines come from
    their own series whether or not this (incremental) recompute rewrites
    them. A new frame; ``found`` itself where nothing changes."""
    # A known price day keeps its parts against the price before the change.
    flagged = (~found["flag"].isin(["", PRICE])).to_numpy() & frame["scope"].isin(
        ["team", "fleet"]
    ).to_numpy()
    if not flagged.any() or members.empty:
        return found
    every = every.reset_index(drop=True)
    baselines = _series_baselines(every, initial)
    joined = _members_with_baselines(members, baselines, every)
    rows = frame[flagged]
    wanted = set(zip(rows["scope"] + "/" + rows["name"],
                     pd.DatetimeIndex(rows["period_start"]), strict=True))  # fmt: skip
    pick = [
        (a, t) in wanted
        for a, t in zip(joined["agg"], joined["period_start"], strict=True)
    ]
    sub = joined[np.asarray(pick, dtype=bool)]
    if sub.empty:
        return found
    parts = lmdi_aggregate(
        sub.drop(columns=["agg_scope", "agg_name"]),
        keys=["agg", "period_start"],
        member="member",
        baseline_totals=_aggregate_totals(baselines),
    ).set_index(["agg", "period_start"])
    return _parts_replaced(frame, found, flagged, parts)


def _series_baselines(
    every: pd.DataFrame, initial: BaselineState | None
) -> pd.DataFrame:
    """Every day series' baseline parts (``BASE_COLUMNS``) by key and day.
    Members resume from the saved state of every day series where there is
    one (the state holds them all)."""
    recent = every
    if initial is not None:
        recent = _from_day(every, initial.day)
    base = baselines_run(
        _detect_input(recent), keys=KEYS, time="period_start",
        config=baseline_config("day"), initial=initial,
    ).figures  # fmt: skip
    comp = pd.concat([recent[["scope", "name", "currency", "period_start"]],
                      base[BASE_COLUMNS]], axis=1)  # fmt: skip
    comp["period_start"] = pd.DatetimeIndex(comp["period_start"])
    return comp


def _members_with_baselines(
    members: pd.DataFrame, baselines: pd.DataFrame, every: pd.DataFrame
) -> pd.DataFrame:
    """``members`` with their baseline parts and ``agg`` ("scope/name"):
    deployments bring their own series' baselines; overheads are few and get
    a series each, per aggregate, priced per aggregate request, run in full."""
    m = members.copy()
    m["period_start"] = pd.DatetimeIndex(m["period_start"])
    dep = baselines[baselines["scope"] == "deployment"].rename(
        columns={"name": "member"}
    )
    m = m.merge(
        dep.drop(columns=["scope"]),
        on=["member", "currency", "period_start"], how="left",
    )  # fmt: skip
    over = m["member"].astype(str).str.startswith("__").to_numpy()
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
        ob = baselines_run(
            series, keys=KEYS, time="period_start", config=baseline_config("day")
        )
        m.loc[over, "cost_b"] = ob.figures["cost_b"].to_numpy()
    m["agg"] = m["agg_scope"] + "/" + m["agg_name"]
    return m


def _aggregate_totals(baselines: pd.DataFrame) -> pd.DataFrame:
    """The team and fleet series' own baseline parts, keyed by ``agg``."""
    agg = baselines[baselines["scope"].isin(["team", "fleet"])].rename(
        columns={"scope": "agg_scope", "name": "agg_name"}
    )
    agg["agg"] = agg["agg_scope"] + "/" + agg["agg_name"]
    return agg[["agg", "period_start", *BASE_COLUMNS]]


def _parts_replaced(
    frame: pd.DataFrame, found: pd.DataFrame, flagged: np.ndarray, parts: pd.DataFrame
) -> pd.DataFrame:
    """A copy of ``found`` whose flagged rows take the aggregate's parts,
    where the decomposition has them (no ``reason`` against it)."""
    out = found.copy()
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
        for name, column in PART_COLUMNS.items():
            out.iat[i, out.columns.get_loc(column)] = row[name]
    return out


# --- weeks and months ---------------------------------------------------------------


def _rolled_up(
    frame: pd.DataFrame, found: pd.DataFrame, grain: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Day figures summed into weeks or months (the bill clock: the bill where
    final, provisional where not; the period's clock is its worst day's).
    Unit costs are ratios of the sums, the baseline the ratio of the days'
    summed baseline parts (the same additive EWMA state); flags and bands
    stay on days and hours."""
    day = pd.concat([frame, found[["cost_b", "tokens_b", "requests_b"]]], axis=1)
    day["tokens"] = day["prompt_tokens"] + day["generation_tokens"]
    keys = list(KEYS)
    sums = rollup(
        day, keys=keys, grain=grain,
        summed=[*ROLLED, "cost_b", "tokens_b", "requests_b"],
    )  # fmt: skip
    period = pd.Series(period_of(day["period_start"], grain), index=day.index)
    by = [day[k] for k in keys] + [period.rename("period_start")]
    grouped = day.groupby(by, sort=True)
    known = grouped[ROLLED_KNOWN].sum(min_count=1)
    known["replicas"] = grouped["replicas"].mean()
    labels = group_labels(day, by)
    out = sums.join(known.join(labels), on=[*keys, "period_start"])
    starts = pd.DatetimeIndex(out["period_start"])
    length = 7 if grain == "week" else starts.days_in_month.to_numpy()
    partial = out["days"].to_numpy() < length
    out["note"] = [
        "; ".join(x for x in (n, NOTE_PARTIAL.format(days=d, length=m) if p else "")
                  if x)
        for n, d, m, p in zip(out["note"], out["days"],
                              np.broadcast_to(length, len(out)), partial, strict=True)
    ]  # fmt: skip
    out["effective_rate"] = np.nan
    units = unit_costs(
        out.assign(tokens=out["prompt_tokens"] + out["generation_tokens"])
    )
    base = unit_costs(
        pd.DataFrame(
            {"cost": out["cost_b"], "tokens": out["tokens_b"],
             "requests": out["requests_b"]}
        )
    )  # fmt: skip
    nan = np.full(len(out), np.nan)
    rolled = pd.DataFrame(
        {
            **{c: units[c].to_numpy() for c in UNIT_COLUMNS},
            "baseline": base["cost_per_1k_requests"].to_numpy(),
            "lower": nan, "upper": nan,
            "baseline_per_1m_tokens": base["cost_per_1m_tokens"].to_numpy(),
            "lower_per_1m_tokens": nan, "upper_per_1m_tokens": nan,
            "flag": "", "cause": "",
            **{p: nan for p in PART_COLUMNS.values()},
            "level_shift": False, "warm": False, "detect_note": "",
        },
        index=out.index,
    )  # fmt: skip
    return out, rolled


# --- closed or not, and the finished rows -------------------------------------------


def _period_starts(stamps: pd.DatetimeIndex, grain: str) -> pd.DatetimeIndex:
    if grain == "hour":
        return stamps.floor("h")
    if grain == "day":
        return stamps.normalize()
    return period_of(stamps, grain)


def period_ends(starts: pd.DatetimeIndex, grain: str) -> pd.DatetimeIndex:
    """Where each period of ``grain`` starting at ``starts`` ends (exclusive)."""
    if grain == "hour":
        return starts + pd.Timedelta(hours=1)
    if grain == "day":
        return starts + pd.Timedelta(days=1)
    if grain == "week":
        return starts + pd.Timedelta(days=7)
    return starts + pd.to_timedelta(starts.days_in_month, unit="D")


def completeness(
    frame: pd.DataFrame,
    grain: str,
    hours: pd.DataFrame,
    *,
    now: pd.Timestamp,
    settle: pd.Timedelta,
    fleet: str,
) -> np.ndarray:
    """Per figure row: whether its period is closed (its end plus ``settle``
    is past at ``now``) and every telemetry hour under it was read after that
    hour closed (``hours["complete"]``). A team, pool or the fleet is
    complete when each of its deployments is. Incomplete figures are shown
    as partial and never judged (analytics.alert_rules)."""
    if frame.empty:
        return np.zeros(0, dtype=bool)
    starts = pd.DatetimeIndex(frame["period_start"])
    closed = np.asarray(period_ends(starts, grain) + settle <= now)
    open_hours = hours[~hours["complete"].astype(bool)] if len(hours) else hours
    if open_hours.empty:
        return closed
    periods = _period_starts(pd.DatetimeIndex(open_hours["period_start"]), grain)
    partial = {
        "deployment": set(zip(open_hours["deployment"], periods, strict=True)),
        "team": set(zip(open_hours["team"], periods, strict=True)),
        "pool": set(zip(open_hours["pool"], periods, strict=True)),
        "fleet": {(fleet, p) for p in periods},
    }
    touched = [
        (name, start) in partial.get(scope, set())
        for scope, name, start in zip(
            frame["scope"], frame["name"], starts, strict=True
        )
    ]
    return closed & ~np.asarray(touched, dtype=bool)


def _joined(*notes: object) -> str:
    return "; ".join(str(x) for x in notes if x)


def _parts(values: np.ndarray) -> list[dict[str, float]]:
    """Per row of LMDI parts (columns as ``PART_COLUMNS``), the finite ones
    by name. Only flagged rows have any: the rest skip the Python loop."""
    names = list(PART_COLUMNS)
    finite = np.isfinite(values)
    out: list[dict[str, float]] = [{} for _ in range(len(values))]
    for i in np.flatnonzero(finite.any(axis=1)):
        out[i] = {
            name: float(v)
            for name, v, ok in zip(names, values[i], finite[i], strict=True)
            if ok
        }
    return out


def _finished(
    frame: pd.DataFrame, found: pd.DataFrame, grain: str, complete: np.ndarray
) -> pd.DataFrame:
    """The stored columns of each figure. A period in progress is shown,
    never judged: no flag, no cause, no parts, no level shift, and a day or
    an hour says so (a week or a month says "partial: N of M days" already)."""
    merged = pd.concat([frame, found], axis=1)
    done = complete.tolist()
    note = merged["note"].tolist()
    if grain in DETECTED_GRAINS:
        note = [
            n if d else _joined(n, NOTE_OPEN) for n, d in zip(note, done, strict=True)
        ]
    parts = np.column_stack(
        [merged[column].to_numpy(float) for column in PART_COLUMNS.values()]
    )
    parts[~complete] = np.nan
    # Judged values of a period in progress are blanked.
    flag = [(f or "") if d else "" for f, d in zip(merged["flag"], done, strict=True)]
    cause = [(c or "") if d else "" for c, d in zip(merged["cause"], done, strict=True)]
    shift = [d and bool(v) for v, d in zip(merged["level_shift"], done, strict=True)]
    return pd.DataFrame(
        {
            "scope": merged["scope"].to_numpy(),
            "name": merged["name"].to_numpy(),
            "grain": grain,
            "period_start": merged["period_start"].to_numpy(),
            "currency": merged["currency"].to_numpy(),
            "clock": [c or "provisional" for c in merged["clock"]],
            "rate_source": [s or "" for s in merged["rate_source"]],
            **{c: merged[c].to_numpy() for c in (*MONEY_COLUMNS, *NUMBER_COLUMNS)},
            "flag": flag,
            "cause": cause,
            "parts": _parts(parts),
            "level_shift": shift,
            "warm": [bool(v) for v in merged["warm"]],
            "note": [
                _joined(n, d) for n, d in zip(note, merged["detect_note"], strict=True)
            ],
            "complete": complete,
        },
        index=merged.index,
    )


# --- the one call -------------------------------------------------------------------


def figures_compute(
    inputs: RecomputeInputs,
    *,
    fleet: str,
    series: Iterable[str] | None,
    cutoff: pd.Timestamp | None,
    saved: Mapping[str, BaselineState | None],
    now: pd.Timestamp,
    settle: pd.Timedelta,
) -> FiguresComputed:
    """The figures of ``series`` (deployment names, their pool siblings
    included; None: every series) from ``cutoff`` on (naive UTC midnight;
    None: every period), at ``now`` (naive UTC) with hours closing ``settle``
    after their end. ``saved``: per detected grain, the latest saved state at
    or before ``latest_resume_day(cutoff, grain)``, if any (ignored without
    a cutoff: the full recompute runs the whole history). ``fleet``: the
    fleet series' name."""
    frames = figure_frames(inputs, fleet=fleet)
    affected = affected_series(series, inputs.deployments, fleet=fleet)
    figures: dict[str, pd.DataFrame] = {}
    states: dict[str, SavedStates] = {}
    flagged = 0
    for grain in DETECTED_GRAINS:
        frame = _of_series(frames[grain], affected)
        if frame.empty:
            continue
        resume = (
            resumable(saved.get(grain), frame, grain) if cutoff is not None else None
        )
        if resume is not None:
            frame = _from_day(frame, resume.day)
        found, at_checkpoints = _detected(
            frame,
            grain,
            initial=resume.select(series_keys(frame)) if resume else None,
            checkpoints=checkpoint_days(
                frames["day"], after=resume.day if resume else None
            ),
            complete=completeness(
                frame, grain, inputs.hours, now=now, settle=settle, fleet=fleet
            ),
        )
        states[grain] = SavedStates(resume.day if resume else None, at_checkpoints)
        if grain == "day":
            found = _aggregate_parts(
                frame, found, frames["members"], frames["day"], resume
            )
        periods = [(grain, frame, found)]
        if grain == "day":
            periods += [(g, *_rolled_up(frame, found, g)) for g in ROLLED_GRAINS]
        for g, f, found_g in periods:
            if cutoff is not None:
                f, found_g = _from_period(f, found_g, first_rewritten(cutoff, g))
            complete = completeness(
                f, g, inputs.hours, now=now, settle=settle, fleet=fleet
            )
            flagged += int(((found_g["flag"] != "").to_numpy() & complete).sum())
            figures[g] = _finished(f, found_g, g, complete)
    return FiguresComputed(
        figures=figures, states=states, series=affected, flagged=flagged
    )
