"""Reads for "what moved": every deployment, team and the fleet over a window
of UTC days against the previous period of the same length, from the stored
daily figures on their own basis (a deployment's direct cost, a team's and
the fleet's fully loaded), with their clocks. The arithmetic is
``analytics.moved``; nothing is recomputed here.

Only complete days are compared: the window ends at the last complete UTC
day at the latest (today is in progress), and a stored day marked partial
counts as missing on its side."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

import pandas as pd
from django import forms
from django.utils import timezone

from analytics.moved import (
    SORTABLE,
    moved,
    moved_sorted,
    period_sums,
    previous_period,
)
from costapp.days import day_start, utc_midnight
from costapp.forms import NamedForm
from costapp.models import Deployment, UnitCostFigure
from costapp.models.economics import FLEET

SCOPES = ("deployment", "team", "fleet")
DEFAULT_SORT = "-change"
COLUMNS = ("scope", "name", "currency", "clock", "cost", "requests", "gpu_hours",
           "tokens", "list_cost")  # fmt: skip


@dataclass(frozen=True)
class Moved:
    """The window as compared (``end`` cut to the last complete day) and one
    row per series (``analytics.moved.moved``'s columns), sorted."""

    start: date
    end: date  # exclusive
    before_start: date
    before_end: date
    asked_end: date  # the window's end as asked, before the cut
    rows: pd.DataFrame

    @property
    def cut(self) -> bool:
        return self.end < self.asked_end

    @property
    def days(self) -> int:
        return max((self.end - self.start).days, 0)


def complete_end_read(end: date) -> date:
    """``end`` (exclusive) no later than today's UTC midnight: today is in
    progress and is never compared as a finished day."""
    return min(end, day_start(timezone.now()).date())


def _series_read(
    team: str, deployments: Iterable[str] | None
) -> dict[str, list[str] | None]:
    """The names per scope in the filter (None: every name of the scope)."""
    if deployments is not None:
        names = list(deployments)
        return {"deployment": names, "team": [team] if team else []}
    if team:
        names = list(
            Deployment.objects.filter(team=team).values_list("name", flat=True)
        )
        return {"deployment": names, "team": [team]}
    return {"deployment": None, "team": None, "fleet": [FLEET]}


def _days_read(
    *, start: date, end: date, series: dict[str, list[str] | None]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The stored daily figures of ``series`` in the period before
    ``[start, end)`` and in it, one row per series and day."""
    before_start, _ = previous_period(start, end)
    rows: list[tuple[object, ...]] = []
    for scope, names in series.items():
        if names == []:
            continue
        qs = UnitCostFigure.objects.filter(
            scope=scope,
            grain="day",
            period_start__gte=utc_midnight(before_start),
            period_start__lt=utc_midnight(end),
        )
        if names is not None:
            qs = qs.filter(name__in=names)
        for f in qs.order_by("name", "period_start"):
            tokens = (
                None
                if f.prompt_tokens is None or f.generation_tokens is None
                else f.prompt_tokens + f.generation_tokens
            )
            # A partial day is missing on its side, never a finished one.
            cost = f.cost if f.complete else None
            rows.append((f.period_start.date(), f.scope, f.name, f.currency, f.clock,
                         cost, f.requests, f.gpu_hours, tokens, f.list_cost))  # fmt: skip
    frame = pd.DataFrame.from_records(rows, columns=["day", *COLUMNS])
    for name in ("cost", "requests", "gpu_hours", "tokens", "list_cost"):
        frame[name] = pd.to_numeric(frame[name], errors="coerce").astype(float)
    now = frame["day"] >= start
    return frame[~now], frame[now]


def moved_read(
    *,
    start: date,
    end: date,
    team: str = "",
    deployments: Iterable[str] | None = None,
    sort: str = DEFAULT_SORT,
    scope: str = "",
    name: str = "",
) -> Moved:
    """Every series in the filter (or the one ``scope``/``name``) over the
    window's complete days against the period of the same length before it.
    ``sort`` is checked (``InvalidInput`` naming it) before anything is read."""
    empty = moved(period_sums(pd.DataFrame(columns=list(COLUMNS))),
                  period_sums(pd.DataFrame(columns=list(COLUMNS))))  # fmt: skip
    moved_sorted(empty, sort)
    cut = complete_end_read(end)
    series: dict[str, list[str] | None] = (
        {scope: [name]} if scope else _series_read(team, deployments)
    )
    if cut <= start:
        before = previous_period(start, end)
        return Moved(start, cut, before[0], before[1], end, empty)
    before_days, now_days = _days_read(start=start, end=cut, series=series)
    rows = moved(period_sums(now_days), period_sums(before_days))
    before = previous_period(start, cut)
    return Moved(start, cut, before[0], before[1], end, moved_sorted(rows, sort))


# --- the page's own input ------------------------------------------------------

SORT_CHOICES = [(c, c) for c in SORTABLE] + [(f"-{c}", f"-{c}") for c in SORTABLE]


class MovedForm(NamedForm):
    """The page's sort, beside the shared window filter: one known column,
    "-" first for descending; anything else is refused, named."""

    sort = forms.ChoiceField(
        choices=SORT_CHOICES,
        required=False,
        label="Sort",
        error_messages={"invalid_choice": "not a column; one of "
                        + ", ".join(SORTABLE) + " (- first: descending)"},
    )  # fmt: skip

    def sort_key(self) -> str:
        if self.is_bound and self.is_valid():
            return self.cleaned_data.get("sort") or DEFAULT_SORT
        return DEFAULT_SORT
