"""Where an incremental unit-cost recompute starts: the first period it
rewrites at each grain, the saved baseline state it may resume from, and the
days at whose start a run saves its states (``BaselineCheckpoint`` in
costapp). The baselines carry state from the first day, so a recompute from a
cutoff either resumes from a state saved before it or runs the whole history.
"""

from __future__ import annotations

import pandas as pd

from analytics.baselines import BaselineConfig, BaselineState
from analytics.unit_cost_frames import KEYS
from analytics.unit_costs import period_of

DETECTED_GRAINS = ("day", "hour")
ROLLED_GRAINS = ("week", "month")
# Baseline states are saved at the start of the day before every week and
# every month over the last quarter (a Sunday, the month's last day): a
# restated day resumes from the one before the week and month that hold it
# (rewritten whole, and their first day reads the day before). And at the
# start of each of the last RECENT_CHECKPOINTS days: a refresh's hours are
# rewritten from yesterday and resume from the day before, which otherwise
# meant the Sunday before, up to a week of hours.
CHECKPOINT_DAYS = 100
RECENT_CHECKPOINTS = 3


def baseline_config(grain: str) -> BaselineConfig:
    return BaselineConfig(grain="day" if grain == "day" else "hour")


# A period's flag settles once the two periods after it are judged
# (``analytics.sustained.settled_runs``): a recompute from ``cutoff``
# rewrites the days from two before it (the hours from the day before), and
# runs from at least a day before its first rewritten period, whose flag
# reads the period before it.
SETTLING = {"day": pd.Timedelta(days=2), "hour": pd.Timedelta(days=1)}
NEIGHBOUR = pd.Timedelta(days=1)


def first_rewritten(cutoff: pd.Timestamp, grain: str) -> pd.Timestamp:
    """The first period a recompute from ``cutoff`` (the first day whose
    inputs changed) rewrites at ``grain``: a week or a month holding the
    first rewritten day is rewritten whole."""
    if grain in DETECTED_GRAINS:
        return cutoff - SETTLING[grain]
    return period_of([cutoff - SETTLING["day"]], grain)[0]


def latest_resume_day(cutoff: pd.Timestamp, grain: str) -> pd.Timestamp:
    """The latest saved state a recompute from ``cutoff`` may resume from:
    days need the week and the month they roll up into recomputed too."""
    if grain == "day":
        first = min(first_rewritten(cutoff, "week"), first_rewritten(cutoff, "month"))
        return first - NEIGHBOUR
    return first_rewritten(cutoff, grain) - NEIGHBOUR


def checkpoint_days(
    days: pd.DataFrame, *, after: pd.Timestamp | None
) -> list[pd.Timestamp]:
    if days.empty:
        return []
    stamps = pd.DatetimeIndex(days["period_start"])
    last = stamps.max().normalize()
    span = pd.date_range(last - pd.Timedelta(days=CHECKPOINT_DAYS), last, freq="D")
    before_period = (span.weekday == 6) | ((span + pd.Timedelta(days=1)).day == 1)
    chosen = span[before_period | (span > last - pd.Timedelta(days=RECENT_CHECKPOINTS))]
    if after is not None:
        chosen = chosen[chosen > after]
    return list(chosen)


def series_keys(frame: pd.DataFrame) -> list[tuple[object, ...]]:
    return list(dict.fromkeys(zip(*(frame[k] for k in KEYS), strict=True)))


def resumable(
    state: BaselineState | None, frame: pd.DataFrame, grain: str
) -> BaselineState | None:
    """``state`` if the recompute of ``frame`` can resume from it, else None
    (run the whole history): none saved, another configuration, or a series
    the state does not know that has rows before it."""
    if state is None:
        return None
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
