"""Reads of the fleet by deployment and UTC day: the deployment page's usage
bars from the hours (``deployment_usage_days_read``), cost and traffic per
deployment-day priced from the hours (``deployment_days_read``: the demo's
story and the unknown-GPU-hours rule are tested on it), and the overview's
table (``overview_read``), each deployment's stored daily figures summed in
SQL. Reads of one series' stored figures, of any scope and grain, are in
``economics.figures``.

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
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import pandas as pd
from django.db.models import (
    Avg,
    Case,
    Count,
    F,
    FloatField,
    Max,
    Q,
    QuerySet,
    Sum,
    When,
)
from django.db.models.functions import Cast, TruncDate

from analytics.unit_costs import (
    WindowTotals,
    daily_unit_costs,
    per_1k_requests,
    per_1m_tokens,
    relative_change,
    truncation_share,
)
from costapp.costs.rates import RateBook, rate_book
from costapp.costs.selectors import deployments_in_scope_read
from costapp.days import utc_midnight
from costapp.economics.figures import FigureRow, figure_row
from costapp.models import (
    Deployment,
    DeploymentHour,
    UnitCostFigure,
)
from costapp.models.costs import money_field
from costapp.models.functions import Epoch

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
    replicas_mean: float | None  # None: no replica count scraped
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
    sums = _day_sums_read(start=start, end=end, deployments=deployments)
    fleet = {
        d.name: d for d in Deployment.objects.select_related("pool").order_by("name")
    }
    book = rate_book()
    return [
        _deployment_day(day, fleet[day["deployment__name"]], book, billed or {})
        for day in sums
    ]


def _day_sums_read(
    *, start: date, end: date, deployments: Iterable[str] | None
) -> Iterable[Mapping[str, Any]]:
    """The hours summed by the database per deployment and UTC day."""
    hours = DeploymentHour.objects.filter(
        hour__gte=utc_midnight(start), hour__lt=utc_midnight(end)
    )
    if deployments is not None:
        hours = hours.filter(deployment__name__in=list(deployments))
    return (
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


def _deployment_day(
    sums: Mapping[str, Any], dep: Deployment, book: RateBook, billed: BilledCosts
) -> DeploymentDay:
    """One deployment-day from the database's sums of its hours."""
    cost, basis, currency, missing = _day_cost(sums, dep, book, billed)
    # Unknown hours make the day's GPU-hours unknown: a partial sum would
    # look like an efficiency gain.
    unknown = int(sums["gpu_unknown"])
    replicas = sums["replicas"]
    return DeploymentDay(
        deployment=sums["deployment__name"],
        day=sums["day"],
        requests_stop=float(sums["stop"] or 0.0),
        requests_length=float(sums["length"] or 0.0),
        requests_aborted=float(sums["aborted"] or 0.0),
        prompt_tokens=float(sums["prompt"] or 0.0),
        generation_tokens=float(sums["generation"] or 0.0),
        gpu_hours=math.nan if unknown else float(sums["gpu_seconds"] or 0.0) / 3600.0,
        replicas_mean=None if replicas is None else float(replicas),
        hours=int(sums["n"]),
        cost=cost,
        basis=basis,
        currency=currency,
        missing=missing,
    )


def _day_cost(
    sums: Mapping[str, Any], dep: Deployment, book: RateBook, billed: BilledCosts
) -> tuple[Decimal | None, Basis, str, str]:
    """(cost, basis, currency, why missing) of one deployment-day: its
    allocated bill where one arrived, else its measured GPU-hours at the rate
    card in force; never a provisional cost on unknown GPU-hours."""
    key = (sums["deployment__name"], sums["day"])
    if key in billed:
        return billed[key], "billed", "USD", ""
    unknown = int(sums["gpu_unknown"])
    if unknown:
        why = f"GPU-hours unknown for {unknown} of {int(sums['n'])} hours"
        return None, "provisional", "USD", why
    rate = book.for_deployment(dep, key[1])
    if rate is None:
        return None, "provisional", "USD", "no rate card in force"
    seconds = Decimal(repr(float(sums["gpu_seconds"] or 0.0)))
    cost = (seconds / Decimal(3600) * rate[0]).quantize(QUANTUM)
    return cost, "provisional", rate[1], ""


def deployment_usage_days_read(
    deployment: Deployment, *, start: date, end: date
) -> pd.DataFrame:
    """Finished requests by reason, GPU-hours and replicas per UTC day in
    ``[start, end)``, summed by the database (the deployment page's bars; no
    cost: the page's costs are the stored figures). A day with one unknown
    hour of GPU-seconds has unknown GPU-hours (NaN)."""
    grouped = (
        DeploymentHour.objects.filter(
            deployment=deployment,
            hour__gte=utc_midnight(start),
            hour__lt=utc_midnight(end),
        )
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values("day")
        .annotate(
            stop=Sum("requests_stop"),
            length=Sum("requests_length"),
            aborted=Sum("requests_aborted"),
            gpu_unknown=Count("id", filter=Q(gpu_seconds__isnull=True)),
            gpu_seconds=Sum("gpu_seconds"),
            replicas=Avg("replicas_mean"),
        )
        .order_by("day")
        .values_list("day", "stop", "length", "aborted", "gpu_unknown",
                     "gpu_seconds", "replicas")
    )  # fmt: skip
    return pd.DataFrame.from_records(
        [
            (day, float(stop or 0.0), float(length or 0.0), float(aborted or 0.0),
             math.nan if unknown else float(gpu or 0.0) / 3600.0,
             math.nan if replicas is None else float(replicas))
            for day, stop, length, aborted, unknown, gpu, replicas in grouped
        ],
        columns=["day", "requests_stop", "requests_length", "requests_aborted",
                 "gpu_hours", "replicas_mean"],
    )  # fmt: skip


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
    unit: Literal["money", "money_unit", "count"]  # money in the overview's currency
    # The card's name in the API (``api/v1/overview/``): labels are for people.
    key: str = ""


@dataclass(frozen=True)
class DeploymentSummary:
    name: str
    team: str
    gpu: str
    requests_7d: float
    cost_7d: float
    cost_per_1k_7d: float
    cost_per_1m_tokens_7d: float
    gpu_hours_7d: float
    truncation_share: float
    # Of the window's stored figures: the last day with a unit cost; and how
    # many days of the table's own days (``Overview.period``) are flagged.
    last: FigureRow | None = None
    flags: int = 0


@dataclass(frozen=True)
class Period:
    """The cards' days and the equal days before them, each with the clocks
    its figures rest on. The cards are the deployments' direct cost: their
    allocated bill (or provisional cost), idle and unallocated left out."""

    start: date
    end: date  # exclusive: the window's end
    previous_start: date  # the previous period is [previous_start, start)
    clocks: tuple[str, ...]  # of the period's figures, final first
    previous_clocks: tuple[str, ...]
    covered: int = 0  # days of the period with a figure
    previous_covered: int = 0

    @property
    def days(self) -> int:
        return (self.end - self.start).days


@dataclass(frozen=True)
class Overview:
    start: date
    end: date  # exclusive
    days: pd.DataFrame  # deployment, day, cost_per_1k_requests (stored)
    kpis: list[Kpi]
    deployments: list[DeploymentSummary]
    basis: set[str]
    currency: str  # every amount's: the overview reads one currency
    period: Period


# The overview adds deployments up, and amounts in two currencies never add:
# it reads the figures in the rate card's currency.
OVERVIEW_CURRENCY = "USD"
# The cards' and the table's days: the window's last 7 (all of a shorter one).
CARD_DAYS = 7
CLOCK_ORDER = ("final", "estimated", "provisional")


def _between(start: date, end: date) -> Q:
    return Q(period_start__gte=utc_midnight(start), period_start__lt=utc_midnight(end))


def _float(value: object) -> float:
    return 0.0 if value is None else float(value)  # type: ignore[arg-type]


def overview_read(
    *,
    today: date,
    days: int = 90,
    team: str = "",
    deployments: Iterable[str] | None = None,
) -> Overview:
    """Everything the overview shows, for the ``days`` days before ``today``
    (the window's exclusive end); ``team``/``deployments`` keep those
    deployments only. The cards and the table are the window's last 7 days
    (all of a shorter window) against as many days before them, read
    whatever the window holds.

    Read from the stored daily figures of the deployments, never re-derived
    from hours and bills per request: a day's cost is its allocated bill
    where one arrived, else its measured GPU-hours at the rate card (the
    figure's list cost). Per deployment the sums come from SQL, the last
    figure with a unit cost from one more query.
    """
    end = today
    start = end - timedelta(days=days)
    n = min(CARD_DAYS, days)
    scope = deployments_in_scope_read(
        team=team, deployments=None if deployments is None else list(deployments)
    )
    # The window and the previous period: a short window's comparison days
    # lie before it.
    read = _overview_figures(
        start=min(start, end - timedelta(days=2 * n)), end=end, scope=scope
    )
    figures = read.filter(_between(start, end))
    frame, clocks = _daily_unit_costs_read(figures)
    period = _period_read(read, end=end, days=n)
    sums = _week_sums_read(read, period=period, window_start=start)
    last = _last_figures_read(figures, {n: r["last_at"] for n, r in sums.items()})
    return Overview(
        start=start,
        end=end,
        days=frame,
        kpis=_kpis(list(sums.values()), days=n),
        deployments=_summaries_read(sums, last, scope),
        basis={"provisional" if c == "provisional" else "billed" for c in clocks},
        currency=OVERVIEW_CURRENCY,
        period=period,
    )


def _period_read(read: QuerySet[UnitCostFigure], *, end: date, days: int) -> Period:
    start = end - timedelta(days=days)
    previous_start = start - timedelta(days=days)

    def clocks(q: Q) -> tuple[tuple[str, ...], int]:
        rows = set(read.filter(q).values_list("clock", "period_start").distinct())
        found = {clock for clock, _ in rows}
        ordered = tuple(c for c in CLOCK_ORDER if c in found)
        return ordered + tuple(sorted(found - set(CLOCK_ORDER))), len(
            {at for _, at in rows}
        )

    now, now_days = clocks(_between(start, end))
    before, before_days = clocks(_between(previous_start, start))
    return Period(
        start=start,
        end=end,
        previous_start=previous_start,
        clocks=now,
        previous_clocks=before,
        covered=now_days,
        previous_covered=before_days,
    )


def _overview_figures(
    *, start: date, end: date, scope: set[str] | None
) -> QuerySet[UnitCostFigure]:
    """The daily deployment figures of [start, end) (a query, not yet run),
    each with the cost the overview shows as ``shown``."""
    figures = UnitCostFigure.objects.filter(
        scope="deployment",
        grain="day",
        currency=OVERVIEW_CURRENCY,
        period_start__gte=utc_midnight(start),
        period_start__lt=utc_midnight(end),
    )
    if scope is not None:
        figures = figures.filter(name__in=scope)
    # The overview's clock: the allocated bill where it arrived, else the
    # measured GPU-hours at the rate card in force (the stored list cost).
    return figures.annotate(
        shown=Case(
            When(clock="provisional", then=F("list_cost")),
            default=F("cost"),
            output_field=money_field(),
        )
    )


def _daily_unit_costs_read(
    figures: QuerySet[UnitCostFigure],
) -> tuple[pd.DataFrame, set[str]]:
    """The overview chart's $ per 1k requests per deployment and day, and the
    clocks its figures are on."""
    # Epoch seconds and floats from the database: 4,500 timestamps and
    # Decimals parsed per request were a sixth of the page.
    daily = list(
        figures.annotate(
            epoch=Epoch("period_start"),
            shown_f=Cast("shown", FloatField()),
            requests_f=Cast("requests", FloatField()),
        )
        .order_by("name", "period_start")
        .values_list("name", "epoch", "shown_f", "requests_f", "clock")
    )
    names, epochs, costs, counts, _ = zip(*daily, strict=True) if daily else ([],) * 5
    frame = daily_unit_costs(
        pd.DataFrame(
            {
                "deployment": list(names),
                "day": (np.asarray(epochs, dtype=float) // 86400)
                .astype("datetime64[D]")
                .astype(object),
                "cost": np.asarray(costs, dtype=float),
                "requests": np.asarray(counts, dtype=float),
                "tokens": np.zeros(len(names)),
            },
            columns=["deployment", "day", "cost", "requests", "tokens"],
        )
    )
    return frame, {clock for *_, clock in daily}


def _week_sums_read(
    read: QuerySet[UnitCostFigure], *, period: Period, window_start: date
) -> dict[str, dict[str, Any]]:
    """Per deployment, summed by the database: the period's days, the equal
    days before them (the KPIs' comparison), the period's flagged days and
    the window's last day with a unit cost."""
    last7 = _between(period.start, period.end)
    prev7 = _between(period.previous_start, period.start)
    tokens = F("prompt_tokens") + F("generation_tokens")
    in_window = _between(window_start, period.end)
    return {
        row["name"]: dict(row)
        for row in read.values("name")
        .annotate(
            week_cost=Sum("shown", filter=last7),
            week_requests=Sum("requests", filter=last7),
            week_length=Sum("requests_length", filter=last7),
            week_tokens=Sum(tokens, filter=last7),
            week_gpu_hours=Sum("gpu_hours", filter=last7),
            any7=Count("pk", filter=last7),
            prev_cost=Sum("shown", filter=prev7),
            prev_requests=Sum("requests", filter=prev7),
            prev_tokens=Sum(tokens, filter=prev7),
            any_prev=Count("pk", filter=prev7),
            flagged=Count("pk", filter=last7 & ~Q(flag="")),
            last_at=Max(
                "period_start",
                filter=in_window & Q(cost_per_1k_requests__isnull=False),
            ),
        )
        .order_by()
    }


def _kpis(sums: list[dict[str, Any]], *, days: int) -> list[Kpi]:
    """The fleet's period against the equal days before it."""

    def total(key: str) -> float:
        return math.fsum(_float(r[key]) for r in sums)

    cur = _totals(total("week_cost"), total("week_requests"), total("week_tokens"))
    prev = _totals(total("prev_cost"), total("prev_requests"), total("prev_tokens"))
    if not any(r["any_prev"] for r in sums):
        # No figure before the period: missing, not $0.00.
        prev = _totals(math.nan, math.nan, math.nan)
    if not any(r["any7"] for r in sums):
        # Nor in it (a window before the first figure): missing too.
        cur = _totals(math.nan, math.nan, math.nan)
    last = f"last {days} day{'s' if days != 1 else ''}"
    return [
        Kpi(f"Spend, {last}", cur.cost, prev.cost,
            relative_change(cur.cost, prev.cost), "money", "spend"),
        Kpi("$ per 1k requests", cur.cost_per_1k_requests,
            prev.cost_per_1k_requests,
            relative_change(cur.cost_per_1k_requests, prev.cost_per_1k_requests),
            "money_unit", "cost_per_1k_requests"),
        Kpi("$ per 1M tokens", cur.cost_per_1m_tokens, prev.cost_per_1m_tokens,
            relative_change(cur.cost_per_1m_tokens, prev.cost_per_1m_tokens),
            "money_unit", "cost_per_1m_tokens"),
        Kpi(f"Requests, {last}", cur.requests, prev.requests,
            relative_change(cur.requests, prev.requests), "count", "requests"),
    ]  # fmt: skip


def _totals(cost: float, requests: float, tokens: float) -> WindowTotals:
    """Totals as ``analytics.unit_costs.window_totals`` makes them: unit
    costs are ratios of the sums (NaN under the minimum volume)."""
    return WindowTotals(
        cost, requests, tokens, per_1k_requests(cost, requests),
        per_1m_tokens(cost, tokens),
    )  # fmt: skip


def _summaries_read(
    sums: Mapping[str, Mapping[str, Any]],
    last: Mapping[str, FigureRow],
    scope: set[str] | None,
) -> list[DeploymentSummary]:
    """A row per deployment in scope, with figures in the window or not."""
    fleet = Deployment.objects.order_by("name").only(
        "name", "team", "gpu_type", "mig_profile", "tensor_parallel_size"
    )
    if scope is not None:
        fleet = fleet.filter(name__in=scope)
    return [_summary(dep, sums.get(dep.name), last.get(dep.name)) for dep in fleet]


def _summary(
    dep: Deployment, sums: Mapping[str, Any] | None, last: FigureRow | None
) -> DeploymentSummary:
    """One deployment's last 7 days; without a figure in them it spent
    nothing and has no unit cost."""
    week = sums if sums and sums["any7"] else None
    nan = float("nan")
    cost = _float(week["week_cost"]) if week else 0.0
    requests = _float(week["week_requests"]) if week else 0.0
    length = _float(week["week_length"]) if week else 0.0
    return DeploymentSummary(
        name=dep.name,
        team=dep.team,
        gpu=f"{dep.gpu_type} MIG {dep.mig_profile}"
        if dep.mig_profile
        else f"{dep.tensor_parallel_size}× {dep.gpu_type}",  # noqa: RUF001
        requests_7d=requests,
        cost_7d=cost,
        cost_per_1k_7d=per_1k_requests(cost, requests) if week else nan,
        cost_per_1m_tokens_7d=per_1m_tokens(cost, _float(week["week_tokens"]))
        if week
        else nan,
        gpu_hours_7d=_float(week["week_gpu_hours"]) if week else 0.0,
        truncation_share=truncation_share(requests - length, length) if week else nan,
        last=last,
        flags=int(sums["flagged"]) if sums else 0,
    )


def _last_figures_read(
    figures: QuerySet[UnitCostFigure], last_at: Mapping[str, datetime | None]
) -> dict[str, FigureRow]:
    """The stored figure of each name at its ``last_at``, in one query."""
    wanted = {(n, at) for n, at in last_at.items() if at is not None}
    if not wanted:
        return {}
    rows = figures.filter(
        name__in={n for n, _ in wanted}, period_start__in={at for _, at in wanted}
    )
    return {f.name: figure_row(f) for f in rows if (f.name, f.period_start) in wanted}
