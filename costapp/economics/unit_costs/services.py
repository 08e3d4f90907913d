"""Writes of unit costs: the stored figures (``UnitCostFigure``).

``unit_costs_recompute`` reads stored telemetry, the allocated bill and the
rate card (``inputs``) and the saved baseline states it may resume from
(``states``), hands them to ``analytics.unit_cost_figures.figures_compute``
in one call, and stores the rows that come back: it does no arithmetic of
its own. It is the ``unit_costs`` step of the pipeline
(``costapp.pipeline.steps``), after the cost shares and before idle, the
month forecasts and the alert evaluation; it never queues anything
(import-linter: only tasks, views and commands queue).

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
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet

from analytics.unit_cost_figures import FiguresComputed, figures_compute
from analytics.unit_cost_resume import first_rewritten
from costapp.days import utc_midnight
from costapp.economics.unit_costs.inputs import recompute_inputs_read, series_siblings
from costapp.economics.unit_costs.states import checkpoints_save, resume_states_read
from costapp.models import UnitCostFigure
from costapp.models.economics import FIGURE_NATURAL_KEY, FLEET
from costapp.pgcopy import rows_insert

logger = logging.getLogger(__name__)

QUANTUM = Decimal("1e-12")
GRAINS = ("hour", "day", "week", "month")


@dataclass(frozen=True)
class RecomputeResult:
    since: date | None
    series: tuple[tuple[str, str], ...] | None  # (scope, name); None: all
    rows_written: int
    rows_deleted: int
    flagged: int


def _money(value: float) -> Decimal | None:
    if value is None or not np.isfinite(value):
        return None
    return Decimal(repr(float(value))).quantize(QUANTUM)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    f = float(value)
    return f if np.isfinite(f) else None


def _figure(row: dict[str, Any], now: datetime) -> UnitCostFigure:
    """A finished row of ``figures_compute`` as the model stores it: dollars
    as Decimal, missing as NULL, the period as an aware UTC datetime."""
    stamp = pd.Timestamp(row["period_start"]).to_pydatetime().replace(tzinfo=UTC)
    return UnitCostFigure(
        scope=row["scope"], name=row["name"], grain=row["grain"], period_start=stamp,
        currency=row["currency"], clock=row["clock"], rate_source=row["rate_source"],
        cost=_money(row["cost"]), list_cost=_money(row["list_cost"]),
        idle_cost=_money(row["idle_cost"]),
        unallocated_cost=_money(row["unallocated_cost"]),
        gpu_hours=_num(row["gpu_hours"]), prompt_tokens=_num(row["prompt_tokens"]),
        generation_tokens=_num(row["generation_tokens"]),
        requests=_num(row["requests"]), requests_length=_num(row["requests_length"]),
        replicas=_num(row["replicas"]),
        cost_per_1k_requests=_num(row["cost_per_1k_requests"]),
        cost_per_1m_tokens=_num(row["cost_per_1m_tokens"]),
        cost_per_gpu_hour=_num(row["cost_per_gpu_hour"]),
        tokens_per_gpu_second=_num(row["tokens_per_gpu_second"]),
        effective_rate=_num(row["effective_rate"]),
        baseline=_num(row["baseline"]), lower=_num(row["lower"]),
        upper=_num(row["upper"]),
        baseline_per_1m_tokens=_num(row["baseline_per_1m_tokens"]),
        lower_per_1m_tokens=_num(row["lower_per_1m_tokens"]),
        upper_per_1m_tokens=_num(row["upper_per_1m_tokens"]),
        flag=row["flag"], cause=row["cause"], parts=row["parts"],
        level_shift=bool(row["level_shift"]), warm=bool(row["warm"]),
        note=row["note"][:300], computed_at=now, complete=bool(row["complete"]),
    )  # fmt: skip


# What an alert rule reads of a figure: the same values again are not news.
JUDGED = ("cost", "cost_per_1k_requests", "cost_per_1m_tokens", "baseline", "lower",
          "upper", "baseline_per_1m_tokens", "requests", "idle_cost", "flag")  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    x, y = float(a), float(b)
    return x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))


def _known_since_carry(
    figures: list[UnitCostFigure], doomed: QuerySet[UnitCostFigure], now: datetime
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


def _rewritten(
    cutoff: pd.Timestamp | None, series: set[tuple[str, str]] | None
) -> QuerySet[UnitCostFigure]:
    """The stored figures a recompute from ``cutoff`` of ``series`` replaces."""
    doomed = UnitCostFigure.objects.all()
    if cutoff is not None:
        # A week or month holding the cutoff is rewritten whole.
        starts = Q(pk__in=[])
        for grain in GRAINS:
            first = first_rewritten(cutoff, grain).date()
            starts |= Q(grain=grain, period_start__gte=utc_midnight(first))
        doomed = doomed.filter(starts)
    if series is not None:
        # One IN list per scope: a refresh of a thousand deployments is
        # four terms, not a thousand.
        by_scope: dict[str, list[str]] = defaultdict(list)
        for scope, name in sorted(series):
            by_scope[scope].append(name)
        match = Q(pk__in=[])
        for scope, names in by_scope.items():
            match |= Q(scope=scope, name__in=names)
        doomed = doomed.filter(match)
    return doomed


@transaction.atomic
def _figures_replace(
    figures: list[UnitCostFigure],
    computed: FiguresComputed,
    *,
    cutoff: pd.Timestamp | None,
    now: datetime,
) -> int:
    """Delete what the recompute rewrites, insert its figures and save its
    baseline states, in one transaction; the rows deleted."""
    doomed = _rewritten(cutoff, computed.series)
    _known_since_carry(figures, doomed, now)
    deleted, _ = doomed.delete()
    rows_insert(UnitCostFigure, figures)
    for grain, saved in computed.states.items():
        checkpoints_save(
            grain, saved.resumed_at, saved.states,
            partial=computed.series is not None, now=now,
        )  # fmt: skip
    return deleted


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
    cutoff = pd.Timestamp(since) if since is not None else None
    computed = figures_compute(
        inputs,
        fleet=FLEET,
        series=series_siblings(series) if series is not None else None,
        cutoff=cutoff,
        saved=resume_states_read(cutoff),
        now=pd.Timestamp(now.astimezone(UTC).replace(tzinfo=None)),
        settle=pd.Timedelta(seconds=settings.COSTAPP_SETTLE_S),
    )
    figures = [
        _figure(row, now)
        for rows in computed.figures.values()
        for row in rows.to_dict("records")
    ]
    deleted = _figures_replace(figures, computed, cutoff=cutoff, now=now)
    logger.info(
        "unit costs recomputed: %d rows (%d flagged), %d deleted, since %s",
        len(figures), computed.flagged, deleted, since,
    )  # fmt: skip
    return RecomputeResult(
        since=since,
        series=tuple(sorted(computed.series)) if computed.series is not None else None,
        rows_written=len(figures),
        rows_deleted=deleted,
        flagged=computed.flagged,
    )
