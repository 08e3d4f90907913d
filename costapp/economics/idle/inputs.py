"""The idle recompute's reads: the deployments' hours, and the allocated
bill with the paid GPU-hours behind it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal

import numpy as np
import pandas as pd
from django.db.models import Max

from analytics.allocation import IDLE
from costapp.catalog import LIST_PRICES
from costapp.costs.allocations import allocation_days_read, bill_days_read
from costapp.costs.selectors import HOUR_UNITS, basis_or_default, usage_days_read
from costapp.days import utc_midnight
from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    Pool,
    RateCard,
    UnitCostFigure,
)


def instance_gpus_read() -> dict[str, int]:
    """GPUs per instance type: the list prices', then the rate cards'."""
    gpus = {p.instance_type: p.gpus for p in LIST_PRICES}
    for it, n in (
        RateCard.objects.filter(unit="instance_hour")
        .exclude(instance_type="")
        .values_list("instance_type", "gpus_per_unit")
    ):
        gpus.setdefault(it, n)
    return gpus


def hours_frame_read(names: list[str], start: date) -> pd.DataFrame:
    """The deployments' hours from ``start``: UTC day, load (finished
    requests per second), measured GPU-hours and mean replicas."""
    rows = DeploymentHour.objects.filter(
        deployment__name__in=names,
        hour__gte=utc_midnight(start),
    ).values_list(
        "deployment__name", "hour", "requests_stop", "requests_length",
        "gpu_seconds", "replicas_mean",
    )  # fmt: skip
    records = [
        (n, pd.Timestamp(h.astimezone(UTC).date()), (s + ln) / 3600.0,
         np.nan if g is None else g / 3600.0, np.nan if r is None else r)
        for n, h, s, ln, g, r in rows.iterator(chunk_size=10_000)
    ]  # fmt: skip
    return pd.DataFrame.from_records(
        records, columns=["deployment", "day", "load", "gpu_hours", "replicas"]
    )


def last_hours_read(deployments: list[Deployment]) -> dict[str, datetime]:
    """Each deployment's last stored hour (none: no telemetry)."""
    return dict(
        DeploymentHour.objects.filter(deployment__in=deployments)
        .values_list("deployment__name")
        .annotate(last=Max("hour"))
    )


def day_costs_read(names: list[str], start: date) -> pd.DataFrame:
    """The deployments' stored daily cost and the GPU-hours behind it, per
    currency, from ``start``: the price of a day's GPU-hour."""
    figures = UnitCostFigure.objects.filter(
        scope="deployment", grain="day",
        name__in=names,
        period_start__gte=utc_midnight(start),
    ).values_list("name", "period_start", "currency", "cost", "gpu_hours")  # fmt: skip
    return pd.DataFrame.from_records(
        [(n, pd.Timestamp(t.astimezone(UTC).date()), c,
          np.nan if v is None else float(v), np.nan if g is None else g)
         for n, t, c, v, g in figures],
        columns=["deployment", "day", "currency", "cost", "cost_gpu_hours"],
    )  # fmt: skip


@dataclass
class Paid:
    amount: Decimal = Decimal(0)
    hours: Decimal = Decimal(0)  # paid GPU-hours
    has_hours: bool = False
    estimated: bool = False
    lines: set[str] = field(default_factory=set)


def paid_inputs_read(
    start: date, end: date, basis: str, solo: set[str], pools: dict[str, Pool]
) -> tuple[dict[tuple[str, str, date, str], Paid], dict[tuple[str, date], float]]:
    """Per (scope, name, day, currency): paid dollars and GPU-hours from the
    allocated bill; and the allocation's measured GPU-hours per member-day."""
    chosen = basis_or_default(basis)
    hours_of = {
        str(pk): q
        for pk, q, unit in CostLine.objects.filter(
            period_start__gte=utc_midnight(start),
            usage_quantity__gt=0,
        ).values_list("pk", "usage_quantity", "usage_unit")
        if unit in HOUR_UNITS
    }
    estimated = {(b.day, b.account_id, b.currency): b.estimated
                 for b in bill_days_read(start, end, chosen)}  # fmt: skip
    gpus = instance_gpus_read()
    solo_gpus = dict(
        Deployment.objects.filter(name__in=solo).values_list("name", "instance_type")
    )
    out: dict[tuple[str, str, date, str], Paid] = defaultdict(Paid)
    for (account, day, cur), alloc in allocation_days_read(start, end, chosen).items():
        est = estimated.get((day, account, cur), False)
        line_total: dict[str, Decimal] = defaultdict(Decimal)
        line_count: dict[str, int] = defaultdict(int)
        for s in alloc.shares:
            line_total[s.line_key] += s.amount
            line_count[s.line_key] += 1
        for s in alloc.shares:
            q = hours_of.get(s.line_key)
            if s.target == IDLE and s.pool in pools:
                slot = out[("pool", s.pool, day, cur)]
                slot.amount += s.amount
            elif s.how in ("pool", "idle") and s.pool in pools:
                slot = out[("pool", s.pool, day, cur)]
            elif s.how == "direct" and s.target in solo:
                slot = out[("deployment", s.target, day, cur)]
                slot.estimated |= est
                if q is None:  # not an instance-hour line (storage, a credit)
                    continue
                per = gpus.get(solo_gpus.get(s.target, ""))
                total = line_total[s.line_key]
                frac = (
                    s.amount / total if total else Decimal(1) / line_count[s.line_key]
                )
                slot.amount += s.amount
                slot.has_hours = True
                if per is None:
                    slot.hours = Decimal("NaN")
                elif slot.hours.is_finite():
                    slot.hours += q * frac * per
                slot.estimated |= est
                continue
            else:
                continue
            slot.estimated |= est
            # Pool capacity as the allocation counts it: node lines with a
            # positive amount, each once, x GPUs per node.
            if (
                s.how in ("pool", "idle")
                and q is not None
                and s.line_key not in slot.lines
                and line_total[s.line_key] > 0
            ):
                slot.lines.add(s.line_key)
                slot.hours += q * pools[s.pool].gpus_per_node
                slot.has_hours = True
    used = {k: float(u.gpu_hours) for k, u in usage_days_read(start, end).items()}
    return dict(out), used
