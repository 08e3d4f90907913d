"""Reads of the stored unit-cost figures, one series at a time, of any scope
(fleet, team, pool, deployment) and grain: the rows, a window's totals, the
flagged periods, a flag's explanation, pool idle, a deployment's card, and the
budgets and names they refer to. Figures are read, never recomputed here.

Reads of the fleet by deployment and UTC day (the overview's table, cost per
deployment-day from the hours) are in ``economics.selectors``; the month-end
forecast is in ``economics.forecasts``; ``economics.present`` turns these rows
into strings."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pandas as pd
from django.db.models import Count, Q, Sum

from analytics.unit_costs import (
    window_totals,
)
from costapp.days import utc_midnight
from costapp.models import (
    Budget,
    Deployment,
    UnitCostFigure,
)
from costapp.models.economics import FLEET

# --- stored figures ----------------------------------------------------------------


@dataclass(frozen=True)
class FigureRow:
    pk: int
    scope: str
    name: str
    grain: str
    period_start: datetime
    currency: str
    clock: str
    rate_source: str
    cost: Decimal | None
    list_cost: Decimal | None
    idle_cost: Decimal | None
    unallocated_cost: Decimal | None
    gpu_hours: float | None
    requests: float | None
    tokens: float | None
    replicas: float | None
    cost_per_1k_requests: float | None
    cost_per_1m_tokens: float | None
    cost_per_gpu_hour: float | None
    tokens_per_gpu_second: float | None
    effective_rate: float | None
    baseline: float | None
    lower: float | None
    upper: float | None
    baseline_per_1m_tokens: float | None
    lower_per_1m_tokens: float | None
    upper_per_1m_tokens: float | None
    flag: str
    cause: str
    parts: dict[str, float]
    level_shift: bool
    note: str
    # False while the period is in progress or rests on data read before it
    # closed: shown as partial, never judged.
    complete: bool = True


def figure_row(f: UnitCostFigure) -> FigureRow:
    tokens = (
        None
        if f.prompt_tokens is None or f.generation_tokens is None
        else f.prompt_tokens + f.generation_tokens
    )
    return FigureRow(
        pk=f.pk, scope=f.scope, name=f.name, grain=f.grain,
        period_start=f.period_start, currency=f.currency, clock=f.clock,
        rate_source=f.rate_source, cost=f.cost, list_cost=f.list_cost,
        idle_cost=f.idle_cost, unallocated_cost=f.unallocated_cost,
        gpu_hours=f.gpu_hours, requests=f.requests, tokens=tokens,
        replicas=f.replicas, cost_per_1k_requests=f.cost_per_1k_requests,
        cost_per_1m_tokens=f.cost_per_1m_tokens,
        cost_per_gpu_hour=f.cost_per_gpu_hour,
        tokens_per_gpu_second=f.tokens_per_gpu_second,
        effective_rate=f.effective_rate, baseline=f.baseline, lower=f.lower,
        upper=f.upper, baseline_per_1m_tokens=f.baseline_per_1m_tokens,
        lower_per_1m_tokens=f.lower_per_1m_tokens,
        upper_per_1m_tokens=f.upper_per_1m_tokens, flag=f.flag, cause=f.cause,
        parts=dict(f.parts or {}),
        level_shift=f.level_shift, note=f.note, complete=f.complete,
    )  # fmt: skip


def figures_read(
    *,
    scope: str,
    names: Iterable[str] | None = None,
    grain: str = "day",
    start: date | datetime | None = None,
    end: date | datetime | None = None,
    flagged_only: bool = False,
) -> list[FigureRow]:
    """Stored figures only (never recomputes), ordered by name and period;
    ``end`` exclusive."""
    qs = UnitCostFigure.objects.filter(scope=scope, grain=grain)
    if names is not None:
        qs = qs.filter(name__in=list(names))
    if start is not None:
        qs = qs.filter(period_start__gte=_as_utc(start))
    if end is not None:
        qs = qs.filter(period_start__lt=_as_utc(end))
    if flagged_only:
        qs = qs.exclude(flag="")
    return [figure_row(f) for f in qs.order_by("name", "period_start")]


def figure_read(pk: int) -> FigureRow | None:
    found = UnitCostFigure.objects.filter(pk=pk).first()
    return figure_row(found) if found is not None else None


def flagged_read(
    *,
    start: date,
    end: date,
    grain: str = "day",
    scopes: Iterable[str] = ("fleet", "team", "deployment"),
    names: Iterable[str] | None = None,
) -> list[FigureRow]:
    """Every flagged period in the window, wherever it falls, latest first."""
    qs = UnitCostFigure.objects.filter(
        grain=grain,
        scope__in=list(scopes),
        period_start__gte=_as_utc(start),
        period_start__lt=_as_utc(end),
    ).exclude(flag="")
    if names is not None:
        qs = qs.filter(name__in=list(names))
    return [figure_row(f) for f in qs.order_by("-period_start", "scope", "name")]


def _as_utc(value: date | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return utc_midnight(value)


def figures_frame(rows: Iterable[FigureRow]) -> pd.DataFrame:
    """Figures as a frame of floats (NaN for missing) for charts and sums."""
    columns = (
        "pk", "scope", "name", "period_start", "currency", "clock", "cost",
        "idle_cost", "unallocated_cost", "gpu_hours", "requests", "tokens",
        "cost_per_1k_requests", "cost_per_1m_tokens", "baseline", "lower", "upper",
        "flag",
    )  # fmt: skip
    nan = float("nan")

    def num(value: object) -> float:
        return nan if value is None else float(value)  # type: ignore[arg-type]

    records = [
        (
            r.pk,
            r.scope,
            r.name,
            r.period_start,
            r.currency,
            r.clock,
            num(r.cost),
            num(r.idle_cost),
            num(r.unallocated_cost),
            num(r.gpu_hours),
            num(r.requests),
            num(r.tokens),
            num(r.cost_per_1k_requests),
            num(r.cost_per_1m_tokens),
            num(r.baseline),
            num(r.lower),
            num(r.upper),
            r.flag,
        )
        for r in rows
    ]
    return pd.DataFrame.from_records(records, columns=list(columns))


def budgets_read() -> list[Budget]:
    return list(Budget.objects.order_by("scope", "name", "currency"))


def budget_exists_read(*, scope: str, name: str, currency: str) -> bool:
    return Budget.objects.filter(scope=scope, name=name, currency=currency).exists()


def scope_names_read() -> dict[str, list[str]]:
    """The names a budget or a figure page may refer to, per scope."""
    deployments = list(Deployment.objects.order_by("name").values_list("name", "team"))
    teams = sorted({team for _, team in deployments if team})
    return {
        "deployment": [name for name, _ in deployments],
        "team": teams,
        "fleet": [FLEET],
    }


# --- what the pages read: windows, pool idle, explanations -------------------------


@dataclass(frozen=True)
class ScopeWindow:
    """One series over a window: its figures and their totals."""

    scope: str
    name: str
    currency: str
    figures: list[FigureRow]
    cost: float
    requests: float
    tokens: float
    idle_cost: float  # NaN: no idle known in the window
    cost_per_1k_requests: float  # ratio of sums, not a mean of ratios
    cost_per_1m_tokens: float
    last: FigureRow | None  # the last period with a unit cost
    flagged: list[FigureRow]
    clocks: tuple[str, ...]


def _scope_window(
    rows: list[FigureRow], scope: str, name: str, currency: str
) -> ScopeWindow:
    frame = figures_frame(rows)
    totals = window_totals(frame.fillna({"cost": 0.0, "requests": 0.0, "tokens": 0.0}))
    idle = frame["idle_cost"].sum(min_count=1) if len(frame) else float("nan")
    last = next((r for r in reversed(rows) if r.cost_per_1k_requests is not None), None)
    return ScopeWindow(
        scope=scope,
        name=name,
        currency=currency,
        figures=rows,
        cost=totals.cost,
        requests=totals.requests,
        tokens=totals.tokens,
        idle_cost=float(idle),
        cost_per_1k_requests=totals.cost_per_1k_requests,
        cost_per_1m_tokens=totals.cost_per_1m_tokens,
        last=last,
        flagged=[r for r in rows if r.flag],
        clocks=tuple(sorted({r.clock for r in rows})),
    )


def scope_windows_read(
    *,
    scope: str,
    start: date,
    end: date,
    grain: str = "day",
    clock: str = "",
    names: Iterable[str] | None = None,
) -> list[ScopeWindow]:
    """Per series (and currency: nothing sums across currencies) of ``scope``:
    stored figures in ``[start, end)`` and their totals."""
    rows = figures_read(scope=scope, names=names, grain=grain, start=start, end=end)
    if clock:
        rows = [r for r in rows if r.clock == clock]
    groups: dict[tuple[str, str], list[FigureRow]] = {}
    for r in rows:
        groups.setdefault((r.name, r.currency), []).append(r)
    return [
        _scope_window(items, scope, name, currency)
        for (name, currency), items in sorted(groups.items())
    ]


@dataclass(frozen=True)
class PoolIdle:
    pool: str
    currency: str
    idle_cost: float
    cost: float
    idle_share: float


def pool_idle_read(
    *,
    start: date,
    end: date,
    deployments: Iterable[str] | None = None,
    pools: Iterable[str] | None = None,
) -> list[PoolIdle]:
    """Idle dollars per pool in the window (billed days), from the stored
    pool figures; with ``deployments``, only the pools they belong to; with
    ``pools``, those pools only."""
    names = None if pools is None else list(pools)
    if deployments is not None:
        names = sorted(
            set(
                Deployment.objects.filter(name__in=list(deployments))
                .exclude(pool=None)
                .values_list("pool__name", flat=True)
            )
        )
    # Summed by the database over the billed days (those with an idle cost).
    qs = UnitCostFigure.objects.filter(
        scope="pool",
        grain="day",
        period_start__gte=_as_utc(start),
        period_start__lt=_as_utc(end),
    )
    if names is not None:
        qs = qs.filter(name__in=names)
    billed = Q(idle_cost__isnull=False)
    sums = (
        qs.values("name", "currency")
        .annotate(
            idle=Sum("idle_cost", filter=billed),
            cost=Sum("cost", filter=billed & Q(cost__isnull=False)),
            days=Count("pk", filter=billed),
        )
        .order_by("name", "currency")
    )
    out = []
    nan = float("nan")
    for s in sums:
        idle = float(s["idle"]) if s["days"] else nan
        # A billed day without a cost adds nothing (as NaN skipped in a sum).
        cost = float(s["cost"] or 0) if s["days"] else nan
        out.append(
            PoolIdle(
                pool=s["name"],
                currency=s["currency"],
                idle_cost=idle,
                cost=cost,
                idle_share=idle / cost if cost > 0 else nan,
            )
        )
    return out


@dataclass(frozen=True)
class Explanation:
    figure: FigureRow
    parts: list[tuple[str, str, float]]  # (key, label, $ per 1k requests)
    total: float  # the parts' sum
    delta: float  # u - u_baseline
    efficiency: float | None  # fleet + traffic, where both exist
    members: list[FigureRow]  # for a team or the fleet: its deployments that day


PART_LABELS = (
    ("price", "price ($ per GPU-hour)"),
    ("fleet", "fleet (GPU-hours)"),
    ("traffic", "traffic (tokens)"),
    ("size", "request size (tokens per request)"),
    ("idle", "idle and unallocated (team and fleet)"),
    ("mix", "mix (requests moving between cheap and dear deployments)"),
)


def explanation_read(pk: int) -> Explanation | None:
    figure = figure_read(pk)
    if figure is None:
        return None
    parts = [
        (key, label, figure.parts[key])
        for key, label in PART_LABELS
        if key in figure.parts
    ]
    if not parts and "cost" in figure.parts:
        parts = [("cost", "cost (no GPU-hours: price and fleet together)",
                  figure.parts["cost"])]  # fmt: skip
        if "traffic" in figure.parts:
            parts.append(("traffic", "traffic", figure.parts["traffic"]))
    nan = float("nan")
    delta = (
        figure.cost_per_1k_requests - figure.baseline
        if figure.cost_per_1k_requests is not None and figure.baseline is not None
        else nan
    )
    efficiency = (
        figure.parts["fleet"] + figure.parts["traffic"]
        if "fleet" in figure.parts and "traffic" in figure.parts
        else None
    )
    members: list[FigureRow] = []
    if figure.scope in ("team", "fleet"):
        names = None
        if figure.scope == "team":
            names = list(
                Deployment.objects.filter(team=figure.name).values_list(
                    "name", flat=True
                )
            )
        members = [
            r
            for r in figures_read(
                scope="deployment",
                names=names,
                grain=figure.grain,
                start=figure.period_start,
                end=figure.period_start + timedelta(seconds=1),
            )
            if r.currency == figure.currency
        ]
    return Explanation(
        figure=figure,
        parts=parts,
        total=math.fsum(v for _, _, v in parts) if parts else nan,
        delta=delta,
        efficiency=efficiency,
        members=members,
    )


@dataclass(frozen=True)
class DeploymentEconomics:
    window: ScopeWindow | None
    pool: PoolIdle | None
    flagged: list[FigureRow]
    rows: list[FigureRow]  # the window's figures at its grain, every currency


def deployment_economics_read(
    deployment: Deployment, *, start: date, end: date, grain: str = "day"
) -> DeploymentEconomics:
    """The deployment's figures of the window, read once: its card (the
    first currency), its pool's idle and its flagged days."""
    rows = figures_read(
        scope="deployment", names=[deployment.name], start=start, end=end, grain=grain
    )
    groups: dict[str, list[FigureRow]] = {}
    for r in rows:
        groups.setdefault(r.currency, []).append(r)
    windows = [
        _scope_window(items, "deployment", deployment.name, currency)
        for currency, items in sorted(groups.items())
    ]
    pool = None
    if deployment.pool is not None:
        pool = next(
            iter(pool_idle_read(start=start, end=end, pools=[deployment.pool.name])),
            None,
        )
    if grain == "day":
        flagged = [r for r in reversed(rows) if r.flag]
    else:
        flagged = flagged_read(start=start, end=end, scopes=("deployment",),
                               names=[deployment.name])  # fmt: skip
    return DeploymentEconomics(
        window=windows[0] if windows else None, pool=pool, flagged=flagged, rows=rows
    )
