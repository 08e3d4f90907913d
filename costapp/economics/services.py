"""Writes of unit economics: the stored figures and budgets.

``unit_costs_recompute`` feeds stored telemetry, the allocated bill and the
rate card to ``analytics`` (clocks, unit costs, baselines, explanations) and
stores what comes back; it does no arithmetic of its own beyond summing
additive parts into teams, pools and the fleet. It is the ``unit_costs`` step
of the pipeline (``costapp.pipeline.steps``), after the cost shares and before
idle, the month forecasts and the alert evaluation; it never queues anything
(import-linter: services never queue).

Series: ``deployment`` (direct: its allocated bill), ``pool`` (its whole bill:
members and ``__idle__``), ``team`` and ``fleet`` (fully loaded: a pool whose
members all belong to one team is that team's, idle included; the idle of a
pool shared by teams and the unallocated bill are the fleet's only).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from analytics.anomalies import TOKEN_BAND, detect_run
from analytics.baselines import BaselineConfig, BaselineState, baselines_run
from analytics.lmdi import lmdi_aggregate
from analytics.unit_costs import MIN_TOKENS, period_of, rollup, unit_costs
from costapp.economics.frames import (
    KEYS,
    affected_series,
    completeness,
    figure_frames,
    group_labels,
)
from costapp.economics.inputs import (
    recompute_inputs_read,
)
from costapp.economics.states import (
    baseline_config,
    checkpoint_days,
    checkpoints_save,
    resume_point,
    series_keys,
)
from costapp.models import Budget, UnitCostFigure
from costapp.models.economics import FIGURE_NATURAL_KEY
from costapp.pgcopy import copy_insert

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


def _detected(
    frame: pd.DataFrame,
    grain: str,
    *,
    initial: BaselineState | None = None,
    checkpoints: list[pd.Timestamp] | None = None,
) -> tuple[pd.DataFrame, dict[pd.Timestamp, BaselineState]]:
    units = unit_costs(
        frame.assign(tokens=frame["prompt_tokens"] + frame["generation_tokens"])
    )
    det_input = _detect_input(frame)
    found, states = detect_run(
        det_input, keys=KEYS, time="period_start", config=baseline_config(grain),
        initial=initial, checkpoints=checkpoints or [],
    )  # fmt: skip
    # The band per 1M tokens: the same EWMA state, cost over tokens (missing
    # where the baseline's tokens are under the minimum volume, as the figure).
    few = ~(found["tokens_b"].to_numpy(float) >= MIN_TOKENS)
    per_token = pd.DataFrame(
        {c: np.where(few, np.nan, found[c].to_numpy(float)) for c in TOKEN_BAND},
        index=found.index,
    )
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
                    "cost_b",
                    "tokens_b",
                    "requests_b",
                ]
            ].rename(columns={"cost": "cost_part", "note": "detect_note"}),
            per_token,
            # Team and fleet days get these from the aggregate LMDI.
            pd.DataFrame({"idle": np.nan, "mix": np.nan}, index=frame.index),
        ],
        axis=1,
    ), states


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
            # Held out of the baselines; a traffic move on one is a dip.
            "holiday": frame["holiday"].to_numpy(bool)
            if "holiday" in frame
            else np.zeros(len(frame), dtype=bool),
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
    initial: BaselineState | None = None,
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
    # Members resume from the saved state of every day series where there is
    # one (the state holds them all); overheads are few and run in full.
    recent = every
    if initial is not None:
        keep = pd.DatetimeIndex(every["period_start"]) >= initial.day
        recent = every[np.asarray(keep)].reset_index(drop=True)
    base = baselines_run(
        _detect_input(recent), keys=KEYS, time="period_start", config=config,
        initial=initial,
    ).figures  # fmt: skip
    comp = pd.concat([recent[["scope", "name", "currency", "period_start"]],
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


NOTE_OPEN = "partial: not closed yet, not judged"
# The LMDI parts' columns in the detection output.
PARTS = ("price", "fleet", "traffic", "size", "cost_part", "idle", "mix")


def _instances(
    frame: pd.DataFrame,
    found: pd.DataFrame,
    grain: str,
    now: datetime,
    complete: np.ndarray,
) -> list[UnitCostFigure]:
    out = []
    merged = pd.concat([frame, found], axis=1)
    for r, done in zip(merged.to_dict("records"), complete.tolist(), strict=True):
        if not done:
            # A period in progress is shown, never judged: no flag, no cause.
            # (A week or a month says "partial: N of M days" already.)
            note = (
                r["note"]
                if grain in ("week", "month")
                else "; ".join(x for x in (r["note"], NOTE_OPEN) if x)
            )
            r = {**r, "flag": "", "cause": "", "level_shift": False, "note": note}
            r.update({k: np.nan for k in PARTS})
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
                baseline_per_1m_tokens=_num(r["baseline_per_1m_tokens"]),
                lower_per_1m_tokens=_num(r["lower_per_1m_tokens"]),
                upper_per_1m_tokens=_num(r["upper_per_1m_tokens"]),
                flag=r["flag"] or "", cause=r["cause"] or "",
                parts=parts, level_shift=bool(r["level_shift"]),
                warm=bool(r["warm"]), note=note[:300], computed_at=now,
                complete=done,
            )
        )  # fmt: skip
    return out


# What an alert rule reads of a figure: the same values again are not news.
JUDGED = ("cost", "cost_per_1k_requests", "cost_per_1m_tokens", "baseline", "lower",
          "upper", "baseline_per_1m_tokens", "requests", "idle_cost", "flag")  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    x, y = float(a), float(b)
    return x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))


def _known_since_carry(
    figures: list[UnitCostFigure], doomed: Any, now: datetime
) -> None:
    """Each complete figure keeps the ``known_since`` of the row it replaces
    when its judged values are the same; otherwise it is news from ``now``."""
    before = {
        tuple(row[:5]): (row[5], row[6:])
        for row in doomed.filter(complete=True, known_since__isnull=False).values_list(
            *FIGURE_NATURAL_KEY, "known_since", *JUDGED
        )
    }
    for f in figures:
        if not f.complete:
            f.known_since = None
            continue
        key = (f.scope, f.name, f.grain, f.period_start, f.currency)
        old = before.get(key)
        same = old is not None and all(
            _same(getattr(f, name), value)
            for name, value in zip(JUDGED, old[1], strict=True)
        )
        f.known_since = old[0] if old is not None and same else now


ROLLED = ["cost", "gpu_hours", "prompt_tokens", "generation_tokens", "requests",
          "requests_length"]  # fmt: skip
# Known only where billed: a period sums the days that have them.
ROLLED_KNOWN = ["list_cost", "idle_cost", "unallocated_cost", "replicas"]
NOTE_PARTIAL = "partial: {days} of {length} days"


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
            **{c: units[c].to_numpy() for c in (
                "cost_per_1k_requests", "cost_per_1m_tokens", "cost_per_gpu_hour",
                "tokens_per_gpu_second")},
            "baseline": base["cost_per_1k_requests"].to_numpy(),
            "lower": nan, "upper": nan,
            "baseline_per_1m_tokens": base["cost_per_1m_tokens"].to_numpy(),
            "lower_per_1m_tokens": nan, "upper_per_1m_tokens": nan,
            "flag": "", "cause": "",
            **{p: nan for p in ("price", "fleet", "traffic", "size", "cost_part",
                                "idle", "mix")},
            "level_shift": False, "warm": False, "detect_note": "",
        },
        index=out.index,
    )  # fmt: skip
    return out, rolled


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
    state from the first day: an incremental recompute resumes from the
    saved state (``BaselineCheckpoint``) before the week and month holding
    ``since``, or runs the series' whole history where none is saved; only
    rows from ``since`` on (whole weeks and months) are written.
    """
    # The stored allocation is the pipeline's step before this one; a day it
    # has not stored yet is allocated on the fly by the read, never stale.
    inputs = recompute_inputs_read(basis=basis)
    frames = figure_frames(inputs)
    affected = affected_series(series, inputs)
    cutoff = (
        pd.Timestamp(datetime.combine(since, time())) if since is not None else None
    )
    now_naive = pd.Timestamp(now.astimezone(UTC).replace(tzinfo=None))
    settle = pd.Timedelta(seconds=settings.COSTAPP_SETTLE_S)
    figures: list[UnitCostFigure] = []
    flagged = 0
    saves: dict[str, tuple[pd.Timestamp | None, dict[pd.Timestamp, BaselineState]]] = {}
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
        resume = resume_point(frame, grain, cutoff) if cutoff is not None else None
        if resume is not None:
            keep = pd.DatetimeIndex(frame["period_start"]) >= resume.day
            frame = frame[np.asarray(keep)].reset_index(drop=True)
        wanted = checkpoint_days(frames["day"], after=resume.day if resume else None)
        found, states = _detected(
            frame,
            grain,
            initial=resume.select(series_keys(frame)) if resume else None,
            checkpoints=wanted,
        )
        saves[grain] = (resume.day if resume else None, states)
        parts = [(grain, frame, found)]
        if grain == "day":
            _aggregate_parts(frame, found, frames["members"], frames["day"], resume)
            parts += [(g, *_rolled_up(frame, found, g)) for g in ("week", "month")]
        for g, f, found_g in parts:
            if cutoff is not None:
                first = cutoff if g in ("day", "hour") else period_of([cutoff], g)[0]
                keep = np.asarray(pd.DatetimeIndex(f["period_start"]) >= first)
                f, found_g = f[keep], found_g[keep]
            complete = completeness(f, g, inputs.hours, now=now_naive, settle=settle)
            flagged += int(((found_g["flag"] != "").to_numpy() & complete).sum())
            figures.extend(_instances(f, found_g, g, now, complete))

    with transaction.atomic():
        doomed = UnitCostFigure.objects.all()
        if since is not None:
            # A week or month holding ``since`` is rewritten whole.
            starts = Q(pk__in=[])
            for g in ("hour", "day", "week", "month"):
                first = since if g in ("hour", "day") else period_of([cutoff], g)[0]
                starts |= Q(
                    grain=g,
                    period_start__gte=datetime.combine(first, time(), tzinfo=UTC),
                )
            doomed = doomed.filter(starts)
        if affected is not None:
            # One IN list per scope: a refresh of a thousand deployments is
            # four terms, not a thousand.
            by_scope: dict[str, list[str]] = defaultdict(list)
            for scope, name in sorted(affected):
                by_scope[scope].append(name)
            match = Q(pk__in=[])
            for scope, names in by_scope.items():
                match |= Q(scope=scope, name__in=names)
            doomed = doomed.filter(match)
        _known_since_carry(figures, doomed, now)
        deleted, _ = doomed.delete()
        if connection.vendor == "postgresql":
            copy_insert(UnitCostFigure, figures)
        else:
            UnitCostFigure.objects.bulk_create(figures, batch_size=2000)
        for grain, (resumed_at, states) in saves.items():
            checkpoints_save(
                grain, resumed_at, states, partial=affected is not None, now=now
            )
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
