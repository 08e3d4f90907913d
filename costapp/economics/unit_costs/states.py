"""Saved baseline states (``BaselineCheckpoint``): the one an incremental
unit-cost recompute may resume from, and how a run's states are stored.
Which days are saved and whether a state is usable is analytics'
(``analytics.unit_cost_resume``)."""

from __future__ import annotations

from datetime import date, datetime

import pandas as pd

from analytics.baselines import BaselineState
from analytics.unit_cost_resume import DETECTED_GRAINS, latest_resume_day
from costapp.models import BaselineCheckpoint


def resume_states_read(
    cutoff: pd.Timestamp | None,
) -> dict[str, BaselineState | None]:
    """Per detected grain, the saved state a recompute from ``cutoff`` may
    resume from (analytics decides whether it can); none for a full one."""
    if cutoff is None:
        return {}
    return {
        grain: checkpoint_read(
            grain, on_or_before=latest_resume_day(cutoff, grain).date()
        )
        for grain in DETECTED_GRAINS
    }


def checkpoint_read(grain: str, *, on_or_before: date) -> BaselineState | None:
    """The latest state of ``grain`` saved at the start of a day up to
    ``on_or_before``, or None."""
    row = (
        BaselineCheckpoint.objects.filter(grain=grain, day__lte=on_or_before)
        .order_by("-day")
        .first()
    )
    return None if row is None else BaselineState.from_bytes(bytes(row.state))


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
