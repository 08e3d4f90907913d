"""Saved baseline states (``BaselineCheckpoint``): where an incremental
unit-cost recompute resumes, and how a run's states are stored."""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from analytics.baselines import BaselineConfig, BaselineState
from analytics.unit_costs import period_of
from costapp.economics.frames import KEYS
from costapp.models import BaselineCheckpoint


def baseline_config(grain: str) -> BaselineConfig:
    return BaselineConfig(grain="day" if grain == "day" else "hour")


# Baseline states are saved at the start of every Monday and every 1st of a
# month over the last quarter: a restated day or a late hour resumes from the
# one before the week and month that hold it (which are rewritten whole).
CHECKPOINT_DAYS = 100


def checkpoint_days(
    days: pd.DataFrame, *, after: pd.Timestamp | None
) -> list[pd.Timestamp]:
    if days.empty:
        return []
    stamps = pd.DatetimeIndex(days["period_start"])
    last = stamps.max().normalize()
    span = pd.date_range(last - pd.Timedelta(days=CHECKPOINT_DAYS), last, freq="D")
    chosen = span[(span.weekday == 0) | (span.day == 1)]
    if after is not None:
        chosen = chosen[chosen > after]
    return list(chosen)


def series_keys(frame: pd.DataFrame) -> list[tuple[object, ...]]:
    return list(dict.fromkeys(zip(*(frame[k] for k in KEYS), strict=True)))


def resume_point(
    frame: pd.DataFrame, grain: str, cutoff: pd.Timestamp
) -> BaselineState | None:
    """The latest saved state at or before the first period the recompute
    rewrites (for days: the week and the month holding ``cutoff`` too), or
    None (run the whole history): none saved, another configuration, or a
    series the state does not know that has rows before it."""
    first = cutoff
    if grain == "day":
        first = min(period_of([cutoff], "week")[0], period_of([cutoff], "month")[0])
    row = (
        BaselineCheckpoint.objects.filter(grain=grain, day__lte=first.date())
        .order_by("-day")
        .first()
    )
    if row is None:
        return None
    state = BaselineState.from_bytes(bytes(row.state))
    if state.config != baseline_config(grain) or list(state.keys) != list(KEYS):
        return None
    known = set(state.series)
    stamps = pd.DatetimeIndex(frame["period_start"])
    for key, before in zip(
        zip(*(frame[k] for k in KEYS), strict=True), stamps < state.day, strict=True
    ):
        if before and key not in known:
            return None
    return state


def checkpoints_save(
    grain: str,
    resumed_at: pd.Timestamp | None,
    states: dict[pd.Timestamp, BaselineState],
    *,
    partial: bool,
    now: datetime,
) -> None:
    """Store the states a run saved. A run over every series from the first
    day replaces them all; one over some series (or from a saved state)
    merges its series into the stored states of the same days, and a stored
    state after its start it could not refresh is dropped (stale)."""
    stored = BaselineCheckpoint.objects.filter(grain=grain)
    if resumed_at is not None:
        stored = stored.filter(day__gt=resumed_at.date())
    elif not partial:
        stored.delete()
        stored = BaselineCheckpoint.objects.none()
    existing = {row.day: row for row in stored}
    rows = []
    for day, state in sorted(states.items()):
        old = existing.pop(day.date(), None)
        if partial or resumed_at is not None:
            if old is None:
                continue  # a state of some series only: never a resume point
            state = BaselineState.from_bytes(bytes(old.state)).merge(state)
        rows.append(
            BaselineCheckpoint(grain=grain, day=day.date(), state=state.to_bytes(),
                               computed_at=now)
        )  # fmt: skip
    stale = [row.pk for row in existing.values()]
    BaselineCheckpoint.objects.filter(pk__in=stale).delete()
    BaselineCheckpoint.objects.filter(
        grain=grain, day__in=[r.day for r in rows]
    ).delete()
    BaselineCheckpoint.objects.bulk_create(rows)
