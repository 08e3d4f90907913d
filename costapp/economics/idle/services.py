"""``idle_figures_recompute``: both kinds of idle in dollars, stored.

It runs after the unit-cost recompute (same ``since`` and series) and writes
``IdleFigure`` rows per deployment or pool and UTC day:

- ``paid``: a pool's ``__idle__`` share of its allocated bill (exact Decimal,
  from ``costs.allocations.allocation_days_read``) with the GPU-hours behind it
  (node-hours x GPUs per node minus the members' measured GPU-hours); for a
  deployment outside pools, the GPU-hours of its billed instance-hour lines
  minus its measured GPU-hours, priced at those lines' own cost per paid
  GPU-hour (``analytics.idle.paid_idle``).
- ``headroom``: per deployment, each hour's serving GPU-hours that the
  capacity model says were not needed at the deployment's target utilisation
  (``Deployment.target_utilisation``, from the fleet file, default 70%;
  ``analytics.idle.headroom_days``), priced at the day's stored direct cost
  per GPU-hour; per pool, the sum of its members.

The arithmetic is in ``analytics.idle``; this module shapes what ``inputs``
reads and writes.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.db import transaction
from django.db.models import Q

from analytics.idle import at_rate, headroom_days, paid_idle
from costapp.economics.idle.capacity import (
    ReplicaCapacity,
    calibrations_key_read,
    replica_capacity,
)
from costapp.economics.idle.flags import ESTIMATED_BILL, UNDERESTIMATES
from costapp.economics.idle.inputs import (
    Paid,
    day_costs_read,
    hours_frame_read,
    last_hours_read,
    paid_inputs_read,
)
from costapp.economics.unit_costs.inputs import series_siblings
from costapp.models import CostLine, Deployment, DeploymentHour
from costapp.models.economics import IdleFigure
from costapp.pgcopy import rows_insert

logger = logging.getLogger(__name__)

QUANTUM = Decimal("1e-12")
NOTE_GAP = "telemetry incomplete that day (missing hours or GPU-seconds)"
NOTE_NO_HOURS = "no instance-hours on the bill: paid GPU-hours unknown"
NOTE_NO_GPUS = "GPUs per instance unknown for {it}: paid GPU-hours unknown"
NOTE_NO_COST = "no cost stored for the day: dollars unknown"


@dataclass(frozen=True)
class IdleResult:
    rows_written: int
    rows_deleted: int


def _money(value: float | Decimal | None) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value.quantize(QUANTUM) if value.is_finite() else None
    if not np.isfinite(value):
        return None
    return Decimal(repr(float(value))).quantize(QUANTUM)


def _opt(value: Any) -> float | None:
    if value is None:
        return None
    f = float(value)
    return f if np.isfinite(f) else None


# --- paid --------------------------------------------------------------------------


def _paid_rows(
    paid: dict[tuple[str, str, date, str], Paid],
    used: dict[tuple[str, date], float],
    measured: pd.DataFrame,
    members: dict[str, list[str]],
    now: datetime,
) -> list[IdleFigure]:
    keys = sorted(paid)
    if not keys:
        return []
    day_used = measured.set_index(["deployment", "day"])
    rows = []
    for scope, name, day, _cur in keys:
        p = paid[(scope, name, day, _cur)]
        if scope == "pool":
            use = sum(used.get((m, day), 0.0) for m in members.get(name, []))
        else:
            k = (name, pd.Timestamp(day))
            ok = k in day_used.index and bool(day_used.loc[k, "complete"])
            use = float(day_used.loc[k, "gpu_hours"]) if ok else np.nan
        rows.append(
            {
                "cost": float(p.amount),
                "paid_gpu_hours": float(p.hours) if p.has_hours else np.nan,
                "gpu_hours": use,
            }
        )
    frame = pd.DataFrame(rows)
    idle = paid_idle(frame)
    out = []
    for i, (scope, name, day, cur) in enumerate(keys):
        p = paid[(scope, name, day, cur)]
        gh = _opt(idle["idle_gpu_hours"].iat[i])
        if scope == "pool":
            amount: Decimal | float | None = p.amount  # the exact __idle__ share
        else:
            amount = _opt(idle["idle_cost"].iat[i])
        note = ""
        if not p.has_hours:
            note = NOTE_NO_HOURS
        elif not p.hours.is_finite():
            note = NOTE_NO_GPUS.format(it="its instance type")
        elif gh is None:
            note = NOTE_GAP
        out.append(
            IdleFigure(
                scope=scope, name=name, day=day, kind="paid", currency=cur,
                gpu_hours=gh, amount=_money(amount), method="bill",
                flags=[ESTIMATED_BILL] if p.estimated else [], note=note,
                computed_at=now,
            )
        )  # fmt: skip
    return out


# --- headroom ----------------------------------------------------------------------


def _capacities(deployments: list[Deployment]) -> dict[str, ReplicaCapacity]:
    """Capacity per replica of each deployment with telemetry, as of the hour
    after its last stored one."""
    cals = calibrations_key_read()
    last = last_hours_read(deployments)
    return {
        d.name: replica_capacity(
            d, now=last[d.name] + timedelta(hours=1), calibrations=cals
        )
        for d in deployments
        if d.name in last
    }


def _headroom_figure(
    r: dict[str, Any], cap: ReplicaCapacity | None, target: float, now: datetime
) -> IdleFigure:
    """One deployment-day's headroom, with the note saying why it is unknown
    or where the model fell short."""
    flags = [UNDERESTIMATES] if r["underestimated_hours"] > 0 else []
    note = ""
    if cap is None or cap.requests_per_s is None:
        note = f"no capacity model: {cap.problem if cap else 'no telemetry'}"
    elif not r["complete"]:
        note = NOTE_GAP
    elif not np.isfinite(r["amount"]):
        note = NOTE_NO_COST
    if flags:
        note = "; ".join(x for x in (
            note, f"load above predicted capacity in {r['underestimated_hours']} h"
        ) if x)  # fmt: skip
    return IdleFigure(
        scope="deployment", name=r["deployment"],
        day=pd.Timestamp(r["day"]).date(), kind="headroom",
        currency=r["currency"] if isinstance(r["currency"], str) else "USD",
        gpu_hours=_opt(r["headroom_gpu_hours"]), amount=_money(r["amount"]),
        method=r["estimate"], flags=flags,
        capacity_per_replica=cap.requests_per_s if cap else None,
        target_utilisation=target, note=note[:300],
        computed_at=now,
    )  # fmt: skip


def _headroom_rows(
    deployments: list[Deployment],
    hours: pd.DataFrame,
    start: date,
    now: datetime,
    target: float | None,
) -> tuple[list[IdleFigure], pd.DataFrame]:
    """Headroom per deployment-day; returns the figures and the per-day
    completeness of telemetry (which the paid kind also needs)."""
    if hours.empty:
        empty = pd.DataFrame(columns=["deployment", "day", "gpu_hours", "complete"])
        return [], empty
    caps = _capacities(deployments)
    h = hours.copy()
    h["capacity_per_replica"] = h["deployment"].map(
        {n: (c.requests_per_s if c.requests_per_s is not None else np.nan)
         for n, c in caps.items()}
    )  # fmt: skip
    h["calibrated"] = h["deployment"].map(
        {n: c.method == "calibrated" for n, c in caps.items()}
    )
    targets = {
        d.name: d.target_utilisation if target is None else target for d in deployments
    }
    h["target_utilisation"] = h["deployment"].map(targets)
    days = headroom_days(h)
    cost = day_costs_read([d.name for d in deployments], start)
    merged = days.merge(cost, on=["deployment", "day"], how="left")
    merged["amount"] = at_rate(
        merged["headroom_gpu_hours"], merged["cost"], merged["cost_gpu_hours"]
    )
    out = [
        _headroom_figure(r, caps.get(r["deployment"]), targets[r["deployment"]], now)
        for r in merged.to_dict("records")
    ]
    complete = days[["deployment", "day", "gpu_hours", "complete"]]
    return out, complete


def _pool_headroom(
    rows: list[IdleFigure], members: dict[str, list[str]], now: datetime
) -> list[IdleFigure]:
    """A pool's headroom: its members' summed; unknown if one is unknown."""
    by = {(r.name, r.day, r.currency): r for r in rows}
    days = sorted({(r.day, r.currency) for r in rows})
    out = []
    for pool, names in sorted(members.items()):
        for day, cur in days:
            parts = [by.get((n, day, cur)) for n in names]
            present = [p for p in parts if p is not None]
            if not present:
                continue
            known = len(present) == len(names) and all(
                p.gpu_hours is not None and p.amount is not None for p in present
            )
            flags = sorted({f for p in present for f in p.flags})
            methods = {p.method for p in present}
            out.append(
                IdleFigure(
                    scope="pool", name=pool, day=day, kind="headroom", currency=cur,
                    gpu_hours=sum(p.gpu_hours or 0.0 for p in present) if known else None,
                    amount=sum((p.amount or Decimal(0) for p in present), Decimal(0))
                    if known else None,
                    method="calibrated" if methods == {"calibrated"} else "roofline",
                    flags=flags, note="" if known else "a member's headroom is unknown",
                    target_utilisation=None, computed_at=now,
                )
            )  # fmt: skip
    return out


# --- the recompute -----------------------------------------------------------------


def idle_figures_recompute(
    *,
    now: datetime,
    since: date | None = None,
    series: Iterable[str] | None = None,
    basis: str = "amortized",
    target_utilisation: float | None = None,
) -> IdleResult:
    """Recompute and store both kinds of idle for ``series`` (deployment
    names, with their pool siblings and pools) from ``since`` on; ``None``
    means every deployment and every day. Headroom is measured against each
    deployment's ``target_utilisation`` unless one is given for all."""
    fleet = Deployment.objects.select_related("pool", "discovery").order_by("name")
    if series is not None:
        fleet = fleet.filter(name__in=series_siblings(series))
    deployments = list(fleet)
    names = [d.name for d in deployments]
    pools = {d.pool.name: d.pool for d in deployments if d.pool is not None}
    members: dict[str, list[str]] = defaultdict(list)
    for d in deployments:
        if d.pool is not None:
            members[d.pool.name].append(d.name)
    solo = {d.name for d in deployments if d.pool is None}
    first = DeploymentHour.objects.order_by("hour").first()
    first_line = CostLine.objects.order_by("period_start").first()
    candidates = [
        x.astimezone(UTC).date()
        for x in (first.hour if first else None,
                  first_line.period_start if first_line else None)
        if x is not None
    ]  # fmt: skip
    start = since or (min(candidates) if candidates else now.date())
    end = now.astimezone(UTC).date() + timedelta(days=1)

    hours = hours_frame_read(names, start)
    headroom, complete = _headroom_rows(
        deployments, hours, start, now, target_utilisation
    )
    paid, used = paid_inputs_read(start, end, basis, solo, pools)
    rows = _paid_rows(paid, used, complete, members, now)
    rows += headroom + _pool_headroom(headroom, dict(members), now)

    with transaction.atomic():
        doomed = IdleFigure.objects.filter(day__gte=start)
        if series is not None:
            doomed = doomed.filter(
                Q(scope="deployment", name__in=names)
                | Q(scope="pool", name__in=list(pools))
            )
        deleted, _ = doomed.delete()
        rows_insert(IdleFigure, rows)
    logger.info(
        "idle figures: %d rows, %d replaced, from %s", len(rows), deleted, start
    )
    return IdleResult(rows_written=len(rows), rows_deleted=deleted)
