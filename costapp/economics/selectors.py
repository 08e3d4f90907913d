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
from costapp.costs.rates import rate_book
from costapp.costs.selectors import deployments_in_scope
from costapp.economics.figures import FigureRow, figure_row, utc_midnight
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
    hours = DeploymentHour.objects.filter(
        hour__gte=utc_midnight(start), hour__lt=utc_midnight(end)
    )
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
                replicas_mean=None if g["replicas"] is None else float(g["replicas"]),
                hours=int(g["n"]),
                cost=cost,
                basis=basis,
                currency=currency,
                missing=missing,
            )
        )
    return out


def deployment_usage_days(
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
    # Of the window's stored figures: the last day with a unit cost, and how
    # many of its days are flagged.
    last: FigureRow | None = None
    flags: int = 0


@dataclass(frozen=True)
class Overview:
    start: date
    end: date  # exclusive
    days: pd.DataFrame  # deployment, day, cost_per_1k_requests (stored)
    kpis: list[Kpi]
    deployments: list[DeploymentSummary]
    basis: set[str]


def _since(end: date, days: int) -> Q:
    return Q(period_start__gte=utc_midnight(end - timedelta(days=days)))


def _float(value: object) -> float:
    return 0.0 if value is None else float(value)  # type: ignore[arg-type]


def overview_read(
    *,
    today: date,
    days: int = 90,
    team: str = "",
    deployments: Iterable[str] | None = None,
) -> Overview:
    """Everything the overview shows, for the ``days`` days before ``today``;
    ``team``/``deployments`` keep those deployments only.

    Read from the stored daily figures of the deployments, never re-derived
    from hours and bills per request: a day's cost is its allocated bill
    where one arrived, else its measured GPU-hours at the rate card (the
    figure's list cost). Per deployment the window's sums come from SQL, the
    last figure with a unit cost from one more query.
    """
    end = today
    start = end - timedelta(days=days)
    scope = deployments_in_scope(
        team=team, deployments=None if deployments is None else list(deployments)
    )
    figures = UnitCostFigure.objects.filter(
        scope="deployment",
        grain="day",
        currency="USD",
        period_start__gte=utc_midnight(start),
        period_start__lt=utc_midnight(end),
    )
    if scope is not None:
        figures = figures.filter(name__in=scope)
    # The overview's clock: the allocated bill where it arrived, else the
    # measured GPU-hours at the rate card in force (the stored list cost).
    figures = figures.annotate(
        shown=Case(
            When(clock="provisional", then=F("list_cost")),
            default=F("cost"),
            output_field=money_field(),
        )
    )
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
    last7 = _since(end, 7)
    prev7 = _since(end, 14) & ~last7
    base28 = _since(end, 35) & ~last7
    tokens = F("prompt_tokens") + F("generation_tokens")
    sums: dict[str, dict[str, Any]] = {
        row["name"]: dict(row)
        for row in figures.values("name")
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
            base_cost=Sum("shown", filter=base28),
            base_requests=Sum("requests", filter=base28),
            any28=Count("pk", filter=base28),
            flagged=Count("pk", filter=~Q(flag="")),
            last_at=Max("period_start", filter=Q(cost_per_1k_requests__isnull=False)),
        )
        .order_by()
    }
    last = _last_figures(figures, {n: r["last_at"] for n, r in sums.items()})

    def total(key: str) -> float:
        return math.fsum(_float(r[key]) for r in sums.values())

    cur = _totals(total("week_cost"), total("week_requests"), total("week_tokens"))
    prev = _totals(total("prev_cost"), total("prev_requests"), total("prev_tokens"))
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
    summaries = []
    fleet = Deployment.objects.order_by("name").only(
        "name", "team", "gpu_type", "mig_profile", "tensor_parallel_size"
    )
    if scope is not None:
        fleet = fleet.filter(name__in=scope)
    nan = float("nan")
    for dep in fleet:
        s = sums.get(dep.name)
        week = bool(s and s["any7"])
        base = bool(s and s["any28"])
        cost = _float(s["week_cost"]) if week else 0.0  # type: ignore[index]
        requests = _float(s["week_requests"]) if week else 0.0  # type: ignore[index]
        length = _float(s["week_length"]) if week else 0.0  # type: ignore[index]
        per_1k = per_1k_requests(cost, requests) if week else nan
        per_1k_base = (
            per_1k_requests(_float(s["base_cost"]), _float(s["base_requests"]))  # type: ignore[index]
            if base
            else nan
        )
        summaries.append(
            DeploymentSummary(
                name=dep.name,
                team=dep.team,
                gpu=f"{dep.gpu_type} MIG {dep.mig_profile}"
                if dep.mig_profile
                else f"{dep.tensor_parallel_size}× {dep.gpu_type}",  # noqa: RUF001
                requests_7d=requests,
                cost_7d=cost,
                cost_per_1k_7d=per_1k,
                cost_per_1k_baseline=per_1k_base,
                cost_per_1k_change=relative_change(per_1k, per_1k_base),
                cost_per_1m_tokens_7d=per_1m_tokens(cost, _float(s["week_tokens"]))  # type: ignore[index]
                if week
                else nan,
                gpu_hours_7d=_float(s["week_gpu_hours"]) if week else 0.0,  # type: ignore[index]
                truncation_share=truncation_share(requests - length, length)
                if week
                else nan,
                last=last.get(dep.name),
                flags=int(s["flagged"]) if s else 0,
            )
        )
    clocks = {clock for *_, clock in daily}
    basis = {"provisional" if c == "provisional" else "billed" for c in clocks}
    return Overview(
        start=start,
        end=end,
        days=frame,
        kpis=kpis,
        deployments=summaries,
        basis=basis,
    )


def _totals(cost: float, requests: float, tokens: float) -> WindowTotals:
    """Totals as ``analytics.unit_costs.window_totals`` makes them: unit
    costs are ratios of the sums (NaN under the minimum volume)."""
    return WindowTotals(
        cost, requests, tokens, per_1k_requests(cost, requests),
        per_1m_tokens(cost, tokens),
    )  # fmt: skip


def _last_figures(
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
