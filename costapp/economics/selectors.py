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
from typing import Literal

import pandas as pd
from django.db.models import Avg, Count, Q, Sum
from django.db.models.functions import TruncDate

from analytics.unit_costs import (
    daily_unit_costs,
    relative_change,
    totals_by_deployment,
    truncation_share,
    window_totals,
)
from costapp.costs.rates import rate_book
from costapp.costs.selectors import billed_deployment_days, deployments_in_scope
from costapp.models import (
    Deployment,
    DeploymentHour,
)

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


def utc_midnight(day: date) -> datetime:
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


def overview_read(
    *,
    today: date,
    days: int = 90,
    team: str = "",
    deployments: Iterable[str] | None = None,
) -> Overview:
    """Everything the overview shows, for the ``days`` days before ``today``;
    ``team``/``deployments`` keep those deployments only."""
    end = today
    start = end - timedelta(days=days)
    scope = deployments_in_scope(
        team=team, deployments=None if deployments is None else list(deployments)
    )
    frame = deployment_days_frame(
        deployment_days_read(
            start=start,
            end=end,
            deployments=scope,
            billed=billed_deployment_days(start, end),
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
    fleet = Deployment.objects.order_by("name")
    if scope is not None:
        fleet = fleet.filter(name__in=scope)
    for dep in fleet:
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
