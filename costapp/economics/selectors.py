"""Reads of unit economics: cost and traffic per deployment-day, the overview.

Cost per deployment-day has two clocks (PRODUCT.md). Until the bill for a day
arrives the cost is *provisional*: measured GPU-hours (``gpu_seconds / 3600``,
MIG already weighted by slices/7) times the rate card's $ per GPU-hour in force
that day. Where an allocated bill exists for the deployment-day, the caller
passes it as ``billed`` and it replaces the provisional figure (basis 'billed').
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal

import pandas as pd
from django.db.models import Avg, Count, Q, Sum
from django.db.models.functions import TruncDate

from analytics.allocation import IDLE, UNALLOCATED
from analytics.forecast import MonthForecast, forecast_month
from analytics.unit_costs import (
    daily_unit_costs,
    relative_change,
    totals_by_deployment,
    truncation_share,
    window_totals,
)
from costapp.costs.rates import rate_book
from costapp.costs.selectors import billed_deployment_days
from costapp.models import (
    Budget,
    CostLine,
    Deployment,
    DeploymentHour,
    IngestRun,
    UnitCostFigure,
)
from costapp.models.economics import FLEET

QUANTUM = Decimal("1e-12")
Basis = Literal["provisional", "billed"]
# A hook for the bills area: (deployment name, UTC day) -> allocated bill.
BilledCosts = Mapping[tuple[str, date], Decimal]


@dataclass(frozen=True)
class DeploymentDay:
    deployment: str
    day: date  # UTC day, as Cost Explorer's
    requests_stop: float
    requests_length: float
    requests_aborted: float
    prompt_tokens: float
    generation_tokens: float
    gpu_hours: float
    replicas_mean: float
    hours: int  # hours with telemetry
    cost: Decimal | None  # None: not measurable (see ``missing``)
    basis: Basis
    currency: str = "USD"
    # Why ``cost`` is None: no rate card, or GPU-hours telemetry could not
    # measure. A provisional cost is never built on unknown GPU-hours.
    missing: str = ""

    @property
    def requests(self) -> float:
        return self.requests_stop + self.requests_length

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.generation_tokens


def _utc(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def deployment_days_read(
    *,
    start: date,
    end: date,
    deployments: Iterable[str] | None = None,
    billed: BilledCosts | None = None,
) -> list[DeploymentDay]:
    """Traffic and cost per deployment and UTC day in ``[start, end)``.

    Days without telemetry have no row (missing is not zero). ``billed`` maps
    (deployment, day) to the allocated bill; those days get basis 'billed'.
    """
    hours = DeploymentHour.objects.filter(hour__gte=_utc(start), hour__lt=_utc(end))
    if deployments is not None:
        hours = hours.filter(deployment__name__in=list(deployments))
    grouped = (
        hours.annotate(day=TruncDate("hour", tzinfo=UTC))
        .values("deployment__name", "day")
        .annotate(
            stop=Sum("requests_stop"),
            length=Sum("requests_length"),
            aborted=Sum("requests_aborted"),
            prompt=Sum("prompt_tokens"),
            generation=Sum("generation_tokens"),
            # Before the Sum of the same name, so the filter reads the column.
            gpu_unknown=Count("id", filter=Q(gpu_seconds__isnull=True)),
            gpu_seconds=Sum("gpu_seconds"),
            replicas=Avg("replicas_mean"),
            n=Count("id"),
        )
        .order_by("deployment__name", "day")
    )
    fleet = {
        d.name: d for d in Deployment.objects.select_related("pool").order_by("name")
    }
    book = rate_book()
    billed = billed or {}
    out: list[DeploymentDay] = []
    for g in grouped:
        name = g["deployment__name"]
        day = g["day"]
        dep = fleet[name]
        unknown = int(g["gpu_unknown"])
        # Unknown hours make the day's GPU-hours unknown: a partial sum would
        # look like an efficiency gain.
        gpu_hours = math.nan if unknown else float(g["gpu_seconds"] or 0.0) / 3600.0
        basis: Basis = "provisional"
        currency = "USD"
        missing = ""
        cost: Decimal | None
        if (name, day) in billed:
            cost, basis = billed[(name, day)], "billed"
        elif unknown:
            cost = None
            missing = f"GPU-hours unknown for {unknown} of {int(g['n'])} hours"
        else:
            rate = book.for_deployment(dep, day)
            if rate is None:
                cost = None
                missing = "no rate card in force"
            else:
                seconds = Decimal(repr(float(g["gpu_seconds"] or 0.0)))
                cost = (seconds / Decimal(3600) * rate[0]).quantize(QUANTUM)
                currency = rate[1]
        out.append(
            DeploymentDay(
                deployment=name,
                day=day,
                requests_stop=float(g["stop"] or 0.0),
                requests_length=float(g["length"] or 0.0),
                requests_aborted=float(g["aborted"] or 0.0),
                prompt_tokens=float(g["prompt"] or 0.0),
                generation_tokens=float(g["generation"] or 0.0),
                gpu_hours=gpu_hours,
                replicas_mean=float(g["replicas"] or 0.0),
                hours=int(g["n"]),
                cost=cost,
                basis=basis,
                currency=currency,
                missing=missing,
            )
        )
    return out


def deployment_days_frame(rows: Iterable[DeploymentDay]) -> pd.DataFrame:
    """Rows as a DataFrame with unit costs (analytics.unit_costs)."""
    records = [
        {
            "deployment": r.deployment,
            "day": r.day,
            "cost": float(r.cost) if r.cost is not None else float("nan"),
            "requests": r.requests,
            "requests_stop": r.requests_stop,
            "requests_length": r.requests_length,
            "requests_aborted": r.requests_aborted,
            "tokens": r.tokens,
            "gpu_hours": r.gpu_hours,
            "replicas_mean": r.replicas_mean,
            "basis": r.basis,
        }
        for r in rows
    ]
    columns = [
        "deployment",
        "day",
        "cost",
        "requests",
        "requests_stop",
        "requests_length",
        "requests_aborted",
        "tokens",
        "gpu_hours",
        "replicas_mean",
        "basis",
    ]
    frame = pd.DataFrame.from_records(records, columns=columns)
    return daily_unit_costs(frame)


@dataclass(frozen=True)
class Kpi:
    label: str
    value: float
    previous: float
    change: float  # relative, NaN when not comparable
    unit: Literal["usd", "usd_unit", "count"]


@dataclass(frozen=True)
class DeploymentSummary:
    name: str
    team: str
    gpu: str
    requests_7d: float
    cost_7d: float
    cost_per_1k_7d: float
    cost_per_1k_baseline: float  # the 28 days before the last 7
    cost_per_1k_change: float
    cost_per_1m_tokens_7d: float
    gpu_hours_7d: float
    truncation_share: float


@dataclass(frozen=True)
class Overview:
    start: date
    end: date  # exclusive
    days: pd.DataFrame  # one row per deployment-day, with unit costs
    kpis: list[Kpi]
    deployments: list[DeploymentSummary]
    basis: set[str]


def overview_read(*, today: date, days: int = 90) -> Overview:
    """Everything the overview shows, for the ``days`` days before ``today``."""
    end = today
    start = end - timedelta(days=days)
    frame = deployment_days_frame(
        deployment_days_read(
            start=start, end=end, billed=billed_deployment_days(start, end)
        )
    )
    last7 = frame[frame["day"] >= end - timedelta(days=7)]
    prev7 = frame[
        (frame["day"] >= end - timedelta(days=14))
        & (frame["day"] < end - timedelta(days=7))
    ]
    base28 = frame[
        (frame["day"] >= end - timedelta(days=35))
        & (frame["day"] < end - timedelta(days=7))
    ]
    cur, prev = window_totals(last7), window_totals(prev7)
    kpis = [
        Kpi("Spend, last 7 days", cur.cost, prev.cost,
            relative_change(cur.cost, prev.cost), "usd"),
        Kpi("$ per 1k requests", cur.cost_per_1k_requests,
            prev.cost_per_1k_requests,
            relative_change(cur.cost_per_1k_requests, prev.cost_per_1k_requests),
            "usd_unit"),
        Kpi("$ per 1M tokens", cur.cost_per_1m_tokens, prev.cost_per_1m_tokens,
            relative_change(cur.cost_per_1m_tokens, prev.cost_per_1m_tokens),
            "usd_unit"),
        Kpi("Requests, last 7 days", cur.requests, prev.requests,
            relative_change(cur.requests, prev.requests), "count"),
    ]  # fmt: skip
    sums = ("cost", "requests", "tokens", "gpu_hours", "requests_stop",
            "requests_length")  # fmt: skip
    week = totals_by_deployment(last7, sum_columns=sums).set_index("deployment")
    base = totals_by_deployment(base28).set_index("deployment")
    summaries = []
    for dep in Deployment.objects.order_by("name"):
        w = week.loc[dep.name] if dep.name in week.index else None
        b = base.loc[dep.name] if dep.name in base.index else None
        nan = float("nan")
        per_1k = float(w["cost_per_1k_requests"]) if w is not None else nan
        per_1k_base = float(b["cost_per_1k_requests"]) if b is not None else nan
        summaries.append(
            DeploymentSummary(
                name=dep.name,
                team=dep.team,
                gpu=f"{dep.gpu_type} MIG {dep.mig_profile}"
                if dep.mig_profile
                else f"{dep.tensor_parallel_size}× {dep.gpu_type}",  # noqa: RUF001
                requests_7d=float(w["requests"]) if w is not None else 0.0,
                cost_7d=float(w["cost"]) if w is not None else 0.0,
                cost_per_1k_7d=per_1k,
                cost_per_1k_baseline=per_1k_base,
                cost_per_1k_change=relative_change(per_1k, per_1k_base),
                cost_per_1m_tokens_7d=float(w["cost_per_1m_tokens"])
                if w is not None
                else nan,
                gpu_hours_7d=float(w["gpu_hours"]) if w is not None else 0.0,
                truncation_share=truncation_share(
                    float(w["requests_stop"]), float(w["requests_length"])
                )
                if w is not None
                else nan,
            )
        )
    return Overview(
        start=start,
        end=end,
        days=frame,
        kpis=kpis,
        deployments=summaries,
        basis=set(frame["basis"].unique()) if len(frame) else set(),
    )


@dataclass(frozen=True)
class DeploymentDetail:
    deployment: Deployment
    start: date
    end: date
    days: pd.DataFrame  # unit costs, requests by reason, GPU-hours, replicas


def deployment_detail_read(
    deployment: Deployment, *, today: date, days: int = 90
) -> DeploymentDetail:
    end = today
    start = end - timedelta(days=days)
    frame = deployment_days_frame(
        deployment_days_read(
            start=start,
            end=end,
            deployments=[deployment.name],
            billed=billed_deployment_days(start, end),
        )
    )
    return DeploymentDetail(
        deployment=deployment,
        start=start,
        end=end,
        days=frame,
    )


# --- inputs of the recompute (issue 9) -------------------------------------------

CLOCK_ORDER = {"provisional": 0, "estimated": 1, "final": 2}


@dataclass(frozen=True)
class RecomputeInputs:
    """What ``unit_costs_recompute`` feeds to ``analytics``, as plain frames.

    ``hours``: one row per deployment and UTC hour with telemetry: deployment,
    team, pool, period_start, day, requests (stop + length), requests_length,
    prompt_tokens, generation_tokens, gpu_hours (NaN where the GPU-seconds are
    unknown), replicas, rate_card ($ per GPU-hour that day; NaN: none),
    currency (the rate card's).
    ``bills``: one row per deployment, UTC day and currency that received a
    share of the allocated bill: deployment, day, currency, bill_cost (float),
    bill_status (final / estimated).
    ``overheads``: pool idle and unallocated dollars: pool ("" for
    unallocated), kind (idle / unallocated), day, currency, amount, bill_status.
    ``deployments``: name, team, pool.
    """

    hours: pd.DataFrame
    bills: pd.DataFrame
    overheads: pd.DataFrame
    deployments: pd.DataFrame


HOUR_COLUMNS = (
    "deployment", "team", "pool", "period_start", "day", "requests",
    "requests_length", "prompt_tokens", "generation_tokens", "gpu_hours",
    "replicas", "rate_card", "currency",
)  # fmt: skip


def recompute_inputs_read(*, basis: str = "amortized") -> RecomputeInputs:
    """Every stored hour, bill day and overhead, for the full history: the
    baselines carry state from the first day, so an incremental recompute
    reads the same inputs as the full one and only recomputes fewer series."""
    from costapp.costs.selectors import (
        allocation_days,
        basis_or_default,
        bill_days,
    )

    fleet = list(Deployment.objects.select_related("pool").order_by("name"))
    by_name = {d.name: d for d in fleet}
    deployments = pd.DataFrame(
        [
            {"name": d.name, "team": d.team, "pool": d.pool.name if d.pool else ""}
            for d in fleet
        ],
        columns=["name", "team", "pool"],
    )
    rows = list(
        DeploymentHour.objects.order_by("deployment__name", "hour").values_list(
            "deployment__name",
            "hour",
            "requests_stop",
            "requests_length",
            "prompt_tokens",
            "generation_tokens",
            "gpu_seconds",
            "replicas_mean",
        )
    )
    book = rate_book()
    cards: dict[tuple[str, date], tuple[float, str]] = {}
    records = []
    for name, hour, stop, length, prompt, gen, gpu_s, replicas in rows:
        dep = by_name[name]
        hour = hour.astimezone(UTC)
        day = hour.date()
        if (name, day) not in cards:
            found = book.for_deployment(dep, day)
            cards[(name, day)] = (
                (float(found[0]), found[1]) if found else (float("nan"), "USD")
            )
        card, currency = cards[(name, day)]
        records.append(
            (
                name, dep.team, dep.pool.name if dep.pool else "",
                hour.replace(tzinfo=None), pd.Timestamp(day), stop + length, length,
                prompt, gen,
                # Unknown GPU-seconds stay unknown: never priced as 0.
                float("nan") if gpu_s is None else gpu_s / 3600.0,
                replicas, card, currency,
            )
        )  # fmt: skip
    hours = pd.DataFrame.from_records(records, columns=list(HOUR_COLUMNS))

    chosen = basis_or_default(basis)
    if len(hours):
        start = hours["day"].min().date()
        end = hours["day"].max().date() + timedelta(days=1)
    else:
        start = end = date(1970, 1, 1)
    # Bill days outside telemetry still count for the overheads and the fleet.
    first_bill = CostLine.objects.order_by("period_start").first()
    last_bill = CostLine.objects.order_by("-period_start").first()
    if first_bill is not None and last_bill is not None:
        start = min(start, first_bill.period_start.astimezone(UTC).date())
        end = max(end, last_bill.period_start.astimezone(UTC).date() + timedelta(1))
    estimated = {
        (b.day, b.account_id, b.currency): b.estimated
        for b in bill_days(start, end, chosen)
    }
    bill_acc: dict[tuple[str, date, str], list[Any]] = {}
    over_acc: dict[tuple[str, str, date, str], list[Any]] = {}
    for (account, day, currency), allocation in allocation_days(
        start, end, chosen
    ).items():
        est = estimated.get((day, account, currency), False)
        for share in allocation.shares:
            if share.target in (IDLE, UNALLOCATED):
                kind = "idle" if share.target == IDLE else "unallocated"
                key = (share.pool if kind == "idle" else "", kind, day, currency)
                slot = over_acc.setdefault(key, [Decimal(0), False])
            else:
                slot = bill_acc.setdefault(
                    (share.target, day, currency), [Decimal(0), False]
                )
            slot[0] += share.amount
            slot[1] |= est
    bills = pd.DataFrame.from_records(
        [
            (
                name,
                pd.Timestamp(day),
                cur,
                float(v[0]),
                "estimated" if v[1] else "final",
            )
            for (name, day, cur), v in sorted(bill_acc.items())
        ],
        columns=["deployment", "day", "currency", "bill_cost", "bill_status"],
    )
    overheads = pd.DataFrame.from_records(
        [
            (
                pool,
                kind,
                pd.Timestamp(day),
                cur,
                float(v[0]),
                "estimated" if v[1] else "final",
            )
            for (pool, kind, day, cur), v in sorted(over_acc.items())
        ],
        columns=["pool", "kind", "day", "currency", "amount", "bill_status"],
    )
    return RecomputeInputs(
        hours=hours, bills=bills, overheads=overheads, deployments=deployments
    )


def series_siblings(names: Iterable[str]) -> set[str]:
    """The deployments whose figures move with ``names``: the names and every
    deployment sharing a pool with one of them (a restated or late hour
    changes how the pool's bill is split)."""
    wanted = set(names)
    pools = set(
        Deployment.objects.filter(name__in=wanted, pool__isnull=False).values_list(
            "pool_id", flat=True
        )
    )
    siblings = set(
        Deployment.objects.filter(pool_id__in=pools).values_list("name", flat=True)
    )
    return wanted | siblings


def run_changes(run: IngestRun) -> tuple[date, set[str] | None]:
    """(first changed day, deployments changed or None for all) of a run.

    Bills change every deployment of an account-day (allocation), so a bill
    run recomputes all series from its window start; a telemetry run only the
    deployments it wrote hours for, and their pool siblings.
    """
    since = run.window_start.astimezone(UTC).date()
    if run.source in ("cost_explorer", "focus", "demo"):
        return since, None
    names = set(
        DeploymentHour.objects.filter(run=run)
        .values_list("deployment__name", flat=True)
        .distinct()
    )
    return since, series_siblings(names)


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
    flag: str
    cause: str
    parts: dict[str, float]
    level_shift: bool
    note: str


def _figure_row(f: UnitCostFigure) -> FigureRow:
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
        upper=f.upper, baseline_per_1m_tokens=f.baseline_per_1m_tokens, flag=f.flag, cause=f.cause, parts=dict(f.parts or {}),
        level_shift=f.level_shift, note=f.note,
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
    return [_figure_row(f) for f in qs.order_by("name", "period_start")]


def figure_get(pk: int) -> FigureRow | None:
    found = UnitCostFigure.objects.filter(pk=pk).first()
    return _figure_row(found) if found is not None else None


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
    return [_figure_row(f) for f in qs.order_by("-period_start", "scope", "name")]


def _as_utc(value: date | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return _utc(value)


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


def scope_names() -> dict[str, list[str]]:
    """The names a budget or a figure page may refer to, per scope."""
    deployments = list(Deployment.objects.order_by("name").values_list("name", "team"))
    teams = sorted({team for _, team in deployments if team})
    return {
        "deployment": [name for name, _ in deployments],
        "team": teams,
        "fleet": [FLEET],
    }


# --- pages -------------------------------------------------------------------------


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


def _window(rows: list[FigureRow], scope: str, name: str, currency: str) -> ScopeWindow:
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
        _window(items, scope, name, currency)
        for (name, currency), items in sorted(groups.items())
    ]


@dataclass(frozen=True)
class PoolIdle:
    pool: str
    currency: str
    idle_cost: float
    cost: float
    idle_share: float


def pool_idle_read(*, start: date, end: date) -> list[PoolIdle]:
    """Idle dollars per pool in the window (billed days), from the stored
    pool figures."""
    out = []
    for w in scope_windows_read(scope="pool", start=start, end=end):
        billed = [r for r in w.figures if r.idle_cost is not None]
        frame = figures_frame(billed)
        idle = float(frame["idle_cost"].sum()) if len(frame) else float("nan")
        cost = float(frame["cost"].sum()) if len(frame) else float("nan")
        out.append(
            PoolIdle(
                pool=w.name,
                currency=w.currency,
                idle_cost=idle,
                cost=cost,
                idle_share=idle / cost if cost > 0 else float("nan"),
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
    figure = figure_get(pk)
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
class BudgetStatus:
    budget: Budget
    forecast: MonthForecast | None  # None: no spend figures for the scope
    spent_share: float  # to date / budget


def _spend_frame(
    scope: str, name: str, currency: str, start: date, end: date
) -> pd.DataFrame:
    rows = [
        r
        for r in figures_read(scope=scope, names=[name], start=start, end=end)
        if r.currency == currency and r.cost is not None
    ]
    return pd.DataFrame(
        {
            "day": [r.period_start.replace(tzinfo=None) for r in rows],
            "cost": [float(r.cost) for r in rows],  # type: ignore[arg-type]
        }
    )


def month_forecast_read(
    *,
    scope: str,
    name: str,
    currency: str,
    today: date,
    budget: float | None = None,
) -> MonthForecast | None:
    """Month-end spend of one series: bill where final, provisional where not,
    plus analytics.forecast's simulated remainder (80% interval)."""
    start = today.replace(day=1) - timedelta(days=70)
    days = _spend_frame(scope, name, currency, start, today)
    if days.empty:
        return None
    as_of = days["day"].max()
    return forecast_month(
        days, as_of=as_of, series=f"{scope}/{name}", budget=budget, interval=0.8
    )


def budget_statuses_read(*, today: date) -> list[BudgetStatus]:
    out = []
    for budget in budgets_read():
        amount = float(budget.monthly_amount)
        forecast = month_forecast_read(
            scope=budget.scope,
            name=budget.name,
            currency=budget.currency,
            today=today,
            budget=amount,
        )
        share = forecast.to_date / amount if forecast is not None else float("nan")
        out.append(BudgetStatus(budget=budget, forecast=forecast, spent_share=share))
    return out


@dataclass(frozen=True)
class DeploymentEconomics:
    window: ScopeWindow | None
    pool: PoolIdle | None
    flagged: list[FigureRow]


def deployment_economics_read(
    deployment: Deployment, *, start: date, end: date
) -> DeploymentEconomics:
    windows = scope_windows_read(
        scope="deployment", names=[deployment.name], start=start, end=end
    )
    pool = None
    if deployment.pool is not None:
        pool = next(
            (p for p in pool_idle_read(start=start, end=end)
             if p.pool == deployment.pool.name),
            None,
        )  # fmt: skip
    flagged = flagged_read(start=start, end=end, scopes=("deployment",),
                           names=[deployment.name])  # fmt: skip
    return DeploymentEconomics(
        window=windows[0] if windows else None, pool=pool, flagged=flagged
    )
