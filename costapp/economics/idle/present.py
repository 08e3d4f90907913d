"""Idle figures as strings for the templates: the idle page's rows, the
overview's card and the deployment page's card (``economics/_idle_card.html``)
read the same figures the same way (``idle.selectors``); the rightsizing
page's rows (``idle.rightsizing``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from costapp import formatting as fmt
from costapp.economics.idle.rightsizing import Rightsizing
from costapp.economics.idle.selectors import IdleRow, IdleTotal, idle_cards_read
from costapp.models import Deployment

METHOD_LABELS = {
    "roofline": "roofline estimate (uncalibrated)",
    "calibrated": "calibrated",
    "bill": "allocated bill",
}


def _methods(methods: Iterable[str]) -> str:
    found = [METHOD_LABELS.get(m, m) for m in methods]
    return ", ".join(found) if found else fmt.MISSING


def idle_row_context(r: IdleRow) -> dict[str, Any]:
    return {
        "scope": r.scope,
        "name": r.name,
        "team": r.team,
        "pool": r.pool,
        "currency": r.currency,
        "paid_gpu_hours": fmt.number(r.paid_gpu_hours),
        "paid": fmt.money(r.paid_amount, r.currency),
        "paid_raw": "" if r.paid_amount is None else str(r.paid_amount),
        "paid_missing": r.paid_missing,
        "paid_none": r.paid_days == 0,
        "headroom_gpu_hours": fmt.number(r.headroom_gpu_hours),
        "headroom": fmt.money(r.headroom_amount, r.currency),
        "headroom_raw": "" if r.headroom_amount is None else str(r.headroom_amount),
        "headroom_missing": r.headroom_missing,
        "method": _methods(r.methods),
        "method_short": ", ".join(r.methods) or fmt.MISSING,
        "roofline": "roofline" in r.methods,
        "underestimated_days": r.underestimated_days,
        "capacity": fmt.number(r.capacity_per_replica, 2),
        "notes": "; ".join(r.notes),
    }


def idle_page_rows(rows: list[IdleRow]) -> list[dict[str, Any]]:
    """Pools, each followed by its members, then deployments outside pools."""
    pools = [r for r in rows if r.scope == "pool"]
    deps = [r for r in rows if r.scope == "deployment"]
    out = []
    for p in pools:
        out.append(idle_row_context(p) | {"member": False})
        out += [idle_row_context(d) | {"member": True}
                for d in deps if d.pool == p.name and d.currency == p.currency]  # fmt: skip
    seen = {(d["name"], d["currency"]) for d in out if d["scope"] == "deployment"}
    out += [idle_row_context(d) | {"member": False}
            for d in deps if (d.name, d.currency) not in seen]  # fmt: skip
    return out


def idle_total_context(t: IdleTotal, title: str) -> dict[str, Any]:
    return {
        "title": title,
        "currency": t.currency,
        "paid": fmt.money(t.paid_amount, t.currency),
        "paid_raw": "" if t.paid_amount is None else str(t.paid_amount),
        "paid_gpu_hours": fmt.number(t.paid_gpu_hours),
        "headroom": fmt.money(t.headroom_amount, t.currency),
        "headroom_raw": "" if t.headroom_amount is None else str(t.headroom_amount),
        "headroom_gpu_hours": fmt.number(t.headroom_gpu_hours),
        "method": _methods(t.methods),
        "roofline": "roofline" in t.methods,
        "underestimated_days": t.underestimated_days,
        "missing_days": t.missing_days,
    }


def idle_cards_context(
    *, start: date, end: date, deployment: Deployment | None = None
) -> list[dict[str, Any]]:
    """The idle card's context (``templates/economics/_idle_card.html``): the
    fleet's totals, or one deployment's, titled."""
    if deployment is None:
        title = "Fleet"
    elif deployment.pool is not None:
        title = f"{deployment.name} (paid idle: pool {deployment.pool.name})"
    else:
        title = deployment.name
    return [
        idle_total_context(t, title)
        for t in idle_cards_read(start=start, end=end, deployment=deployment)
    ]


def _count(value: float | None) -> str:
    """Replicas and GPUs: whole where whole (MIG slices and hourly means are not)."""
    if value is None:
        return fmt.MISSING
    return fmt.number(value, 0 if abs(value - round(value)) < 1e-9 else 1)


def _action(r: Rightsizing) -> str:
    change, gpus = r.change, r.gpus_per_replica
    if change is None:
        return r.problem or "not sized: no capacity per replica or no replica gauge"
    at = f"at its peak hour within its SLA at {r.target_utilisation:.0%} utilisation"
    if r.underestimated:
        carried = (r.replicas_running or 0.0) * (r.capacity_per_replica or 0.0)
        return (
            f"{r.deployment}: the capacity model underestimates it: "
            f"{_count(r.replicas_running)} replicas carried "
            f"{fmt.number(r.requests_per_s, 2)} req/s, more than the "
            f"{fmt.number(carried, 2)} it says they carry within the SLA; fit a "
            "calibration on its what-if page before acting on this row"
        )
    if change <= -1:
        fewer = f"could run {_count(-change)} fewer replicas"
        if gpus is not None:
            fewer += f" ({_count(-change * gpus)} fewer GPUs)"
        return f"{r.deployment} {fewer} {at}"
    if change > 0:
        return f"{r.deployment} needs {_count(change)} more replicas {at}"
    return f"{r.deployment} runs what it needs {at}"


def _tone(r: Rightsizing) -> str:
    if r.change is None:
        return ""
    if r.underestimated:
        return "warn"
    return "good" if r.change <= -1 else "bad" if r.change > 0 else ""


def rightsizing_context(rows: list[Rightsizing], *, days: int) -> dict[str, Any]:
    return {
        "days": days,
        "rows": [
            {
                "deployment": r.deployment,
                "team": r.team,
                "peak_hour": r.peak_hour,
                "requests_per_s": fmt.number(r.requests_per_s, 2),
                "capacity": fmt.number(r.capacity_per_replica, 2),
                "roofline": r.method == "roofline",
                "method": METHOD_LABELS.get(r.method, r.method),
                "target": f"{r.target_utilisation:.0%}",
                "running": _count(r.replicas_running),
                "needed": _count(r.needed_at_sla),
                "recommended": _count(r.recommended),
                "change": fmt.MISSING
                if r.change is None
                else f"{r.change:+,.{0 if r.change == round(r.change) else 1}f}",
                "tone": _tone(r),
                "gpus_running": _count(r.gpus_running),
                "gpus_recommended": _count(r.gpus_recommended),
                "gpus_per_replica": _count(r.gpus_per_replica),
                "headroom": fmt.money(r.headroom_cost, r.currency),
                "headroom_raw": "" if r.headroom_cost is None else str(r.headroom_cost),
                "headroom_gpu_hours": fmt.number(r.headroom_gpu_hours, 1),
                "days_known": r.headroom_days_known,
                "currency": r.currency,
                "action": _action(r),
                "sized": r.change is not None,
                "underestimated": r.underestimated,
            }
            for r in rows
        ],
    }
