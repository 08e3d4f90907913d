"""Idle in dollars, both kinds: the service that stores it and the reads.

``idle_figures_recompute`` runs after the unit-cost recompute (same ``since``
and series) and writes ``IdleFigure`` rows per deployment or pool and UTC day:

- ``paid``: a pool's ``__idle__`` share of its allocated bill (exact Decimal,
  from ``costs.allocations.allocation_days``) with the GPU-hours behind it
  (node-hours x GPUs per node minus the members' measured GPU-hours); for a
  deployment outside pools, the GPU-hours of its billed instance-hour lines
  minus its measured GPU-hours, priced at those lines' own cost per paid
  GPU-hour (``analytics.idle.paid_idle``).
- ``headroom``: per deployment, each hour's serving GPU-hours that the
  capacity model says were not needed at the deployment's target utilisation
  (``Deployment.target_utilisation``, from the fleet file, default 70%;
  ``analytics.idle.headroom_days``), priced at the day's stored direct cost
  per GPU-hour; per pool, the sum of its members.

The arithmetic is in ``analytics.idle``; this module reads, shapes and writes.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.db import transaction
from django.db.models import Max, Q

from analytics.allocation import IDLE
from analytics.capacity import engine as capacity_engine
from analytics.capacity.errors import CapacityError
from analytics.idle import at_rate, headroom_days, paid_idle
from costapp.catalog import LIST_PRICES
from costapp.models import (
    Calibration,
    CostLine,
    Deployment,
    DeploymentHour,
    Pool,
    RateCard,
    UnitCostFigure,
)
from costapp.models.economics import IdleFigure

logger = logging.getLogger(__name__)

QUANTUM = Decimal("1e-12")
UNDERESTIMATES = "model_underestimates"
ESTIMATED_BILL = "estimated_bill"
NOTE_GAP = "telemetry incomplete that day (missing hours or GPU-seconds)"
NOTE_NO_HOURS = "no instance-hours on the bill: paid GPU-hours unknown"
NOTE_NO_GPUS = "GPUs per instance unknown for {it}: paid GPU-hours unknown"
NOTE_NO_COST = "no cost stored for the day: dollars unknown"


# --- capacity per replica, once per deployment per recompute ----------------------


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica carries within the SLA, per the capacity engine."""

    requests_per_s: float | None  # None: the engine could not say
    method: str  # roofline | calibrated
    label: str = ""
    problem: str = ""


_CAPACITY_CACHE: dict[tuple[Any, ...], ReplicaCapacity] = {}
# Every deployment of a large fleet twice over (by day and by scenario).
_CAPACITY_CACHE_SIZE = 8192


def _calibration_key() -> tuple[Any, ...]:
    return tuple(Calibration.objects.order_by("pk").values_list("pk", "created_at"))


def replica_capacity(
    deployment: Deployment, *, now: datetime, calibrations: tuple[Any, ...]
) -> ReplicaCapacity:
    """Max requests/s one replica sustains within the deployment's SLA, at
    the request shape of its busiest recent hour (``deployment_today``).

    Derived once per UTC day of ``now`` for the deployment as it stands (its
    fields and what the engine reported, ``_what_runs``) and the stored
    calibrations: reading what runs today
    takes a few queries per deployment, too many for a fleet of a thousand
    every refresh, and the busiest hour of the last seven days moves slowly.
    The engine itself runs once per scenario."""
    from costapp.capacity import adapters
    from costapp.capacity.selectors import deployment_today

    daily = (_what_runs(deployment), now.date(), calibrations)
    if daily in _CAPACITY_CACHE:
        return _CAPACITY_CACHE[daily]
    today = deployment_today(deployment, now=now)
    if today.scenario is None:
        found = ReplicaCapacity(None, "roofline", problem="; ".join(today.problems))
        _remember(daily, found)
        return found
    key = (repr(today.scenario), calibrations)
    if key in _CAPACITY_CACHE:
        _remember(daily, _CAPACITY_CACHE[key])
        return _CAPACITY_CACHE[key]
    cals = adapters.engine_calibrations(Calibration.objects.all())
    try:
        result = capacity_engine.evaluate(today.scenario, calibrations=cals)
    except CapacityError as exc:
        found = ReplicaCapacity(None, "roofline", problem=str(exc))
    else:
        method = "roofline" if result.calibration.kind == "roofline" else "calibrated"
        if not result.starts:
            found = ReplicaCapacity(None, method, result.calibration.label,
                                    result.reason or "does not start")  # fmt: skip
        else:
            found = ReplicaCapacity(
                float(result.max_requests_per_s_within_sla),
                method,
                result.calibration.label,
            )
    _remember(key, found)
    _remember(daily, found)
    return found


def _what_runs(d: Deployment) -> str:
    """Everything of a deployment its capacity depends on, but its traffic."""
    try:
        config = sorted((d.discovery.cache_config or {}).items())
    except Deployment.discovery.RelatedObjectDoesNotExist:  # type: ignore[attr-defined]
        config = []
    return repr(
        (d.pk, d.engine, d.engine_version, d.model_name, d.gpu_type, d.gpu_count,
         d.tensor_parallel_size, d.mig_profile, d.slo_ttft_p95_ms, d.slo_itl_p95_ms,
         config)
    )  # fmt: skip


def _remember(key: tuple[Any, ...], found: ReplicaCapacity) -> None:
    if len(_CAPACITY_CACHE) >= _CAPACITY_CACHE_SIZE:
        _CAPACITY_CACHE.clear()
    _CAPACITY_CACHE[key] = found


# --- inputs ------------------------------------------------------------------------


def _instance_gpus() -> dict[str, int]:
    gpus = {p.instance_type: p.gpus for p in LIST_PRICES}
    for it, n in (
        RateCard.objects.filter(unit="instance_hour")
        .exclude(instance_type="")
        .values_list("instance_type", "gpus_per_unit")
    ):
        gpus.setdefault(it, n)
    return gpus


def _hours_frame(names: list[str], start: date) -> pd.DataFrame:
    rows = DeploymentHour.objects.filter(
        deployment__name__in=names,
        hour__gte=datetime.combine(start, time(), tzinfo=UTC),
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


@dataclass
class _Paid:
    amount: Decimal = Decimal(0)
    hours: Decimal = Decimal(0)  # paid GPU-hours
    has_hours: bool = False
    estimated: bool = False
    lines: set[str] = field(default_factory=set)


def _paid_inputs(
    start: date, end: date, basis: str, solo: set[str], pools: dict[str, Pool]
) -> tuple[dict[tuple[str, str, date, str], _Paid], dict[tuple[str, date], float]]:
    """Per (scope, name, day, currency): paid dollars and GPU-hours from the
    allocated bill; and the allocation's measured GPU-hours per member-day."""
    from costapp.costs.allocations import allocation_days, bill_days
    from costapp.costs.selectors import HOUR_UNITS, basis_or_default, usage_days

    chosen = basis_or_default(basis)
    hours_of = {
        str(pk): q
        for pk, q, unit in CostLine.objects.filter(
            period_start__gte=datetime.combine(start, time(), tzinfo=UTC),
            usage_quantity__gt=0,
        ).values_list("pk", "usage_quantity", "usage_unit")
        if unit in HOUR_UNITS
    }
    estimated = {(b.day, b.account_id, b.currency): b.estimated
                 for b in bill_days(start, end, chosen)}  # fmt: skip
    gpus = _instance_gpus()
    solo_gpus = dict(
        Deployment.objects.filter(name__in=solo).values_list("name", "instance_type")
    )
    out: dict[tuple[str, str, date, str], _Paid] = defaultdict(_Paid)
    for (account, day, cur), alloc in allocation_days(start, end, chosen).items():
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
    used = {k: float(u.gpu_hours) for k, u in usage_days(start, end).items()}
    return dict(out), used


# --- the recompute -----------------------------------------------------------------


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


def _paid_rows(
    paid: dict[tuple[str, str, date, str], _Paid],
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
    cals = _calibration_key()
    last = dict(
        DeploymentHour.objects.filter(deployment__in=deployments)
        .values_list("deployment__name")
        .annotate(last=Max("hour"))
    )
    caps = {
        d.name: replica_capacity(
            d, now=last[d.name] + timedelta(hours=1), calibrations=cals
        )
        for d in deployments
        if d.name in last
    }
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
    figures = UnitCostFigure.objects.filter(
        scope="deployment", grain="day",
        name__in=[d.name for d in deployments],
        period_start__gte=datetime.combine(start, time(), tzinfo=UTC),
    ).values_list("name", "period_start", "currency", "cost", "gpu_hours")  # fmt: skip
    cost = pd.DataFrame.from_records(
        [(n, pd.Timestamp(t.astimezone(UTC).date()), c,
          np.nan if v is None else float(v), np.nan if g is None else g)
         for n, t, c, v, g in figures],
        columns=["deployment", "day", "currency", "cost", "cost_gpu_hours"],
    )  # fmt: skip
    merged = days.merge(cost, on=["deployment", "day"], how="left")
    merged["amount"] = at_rate(
        merged["headroom_gpu_hours"], merged["cost"], merged["cost_gpu_hours"]
    )
    out = []
    for r in merged.to_dict("records"):
        cap = caps.get(r["deployment"])
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
        out.append(
            IdleFigure(
                scope="deployment", name=r["deployment"],
                day=pd.Timestamp(r["day"]).date(), kind="headroom",
                currency=r["currency"] if isinstance(r["currency"], str) else "USD",
                gpu_hours=_opt(r["headroom_gpu_hours"]), amount=_money(r["amount"]),
                method=r["estimate"], flags=flags,
                capacity_per_replica=cap.requests_per_s if cap else None,
                target_utilisation=targets[r["deployment"]], note=note[:300],
                computed_at=now,
            )
        )  # fmt: skip
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
    from costapp.economics.inputs import series_siblings

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

    hours = _hours_frame(names, start)
    headroom, complete = _headroom_rows(
        deployments, hours, start, now, target_utilisation
    )
    paid, used = _paid_inputs(start, end, basis, solo, pools)
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
        IdleFigure.objects.bulk_create(rows, batch_size=2000)
    logger.info(
        "idle figures: %d rows, %d replaced, from %s", len(rows), deleted, start
    )
    return IdleResult(rows_written=len(rows), rows_deleted=deleted)
