"""Selector results as strings for templates (templates only print strings).

Shared by the economics pages and the deployment page (fleet), so a figure
reads the same everywhere.
"""

from __future__ import annotations

from typing import Any

from costapp import formatting as fmt
from costapp.economics.figures import (
    DeploymentEconomics,
    FigureRow,
    PoolIdle,
    ScopeWindow,
)

CLOCK_LABELS = {
    "final": "final bill",
    "estimated": "estimated bill",
    "provisional": "provisional",
}
FLAG_LABELS = {
    "anomaly": "cost anomaly",
    "traffic": "traffic change (not an anomaly)",
    "size": "request size change",
}


def _f(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


PARTIAL = "partial, not closed"


def period(row: FigureRow) -> str:
    """The period's name; one still in progress (or read before it closed)
    says so: its figure will move, and it is not judged."""
    if row.grain == "hour":
        text = row.period_start.strftime("%Y-%m-%d %H:00 UTC")
    elif row.grain == "week":
        text = row.period_start.strftime("week of %Y-%m-%d")
    elif row.grain == "month":
        text = row.period_start.strftime("%Y-%m")
    else:
        text = row.period_start.strftime("%Y-%m-%d")
    return text if row.complete else f"{text} \N{MIDDLE DOT} {PARTIAL}"


def flag_row(row: FigureRow) -> dict[str, Any]:
    return {
        "pk": row.pk,
        "scope": row.scope,
        "name": row.name,
        "period": period(row),
        "flag": row.flag,
        "flag_label": FLAG_LABELS.get(row.flag, row.flag)
        if row.complete
        else f"{PARTIAL}: not judged yet",
        "clock": CLOCK_LABELS.get(row.clock, row.clock),
        "value": fmt.money_unit(row.cost_per_1k_requests, row.currency),
        "baseline": fmt.money_unit(row.baseline, row.currency),
        "band": f"{fmt.money_unit(row.lower, row.currency)} \N{EN DASH} "
        f"{fmt.money_unit(row.upper, row.currency)}",
        "cause": row.cause,
        "level_shift": row.level_shift,
    }


def last_row(row: FigureRow | None, currency: str) -> dict[str, Any]:
    if row is None:
        return {"period": fmt.MISSING, "value": fmt.MISSING, "baseline": fmt.MISSING,
                "band": fmt.MISSING, "per_1m": fmt.MISSING,
                "per_1m_baseline": fmt.MISSING, "per_1m_band": fmt.MISSING,
                "clock": "", "flag": ""}  # fmt: skip
    return {
        "period": period(row),
        "value": fmt.money_unit(row.cost_per_1k_requests, currency),
        "per_1m": fmt.money_unit(row.cost_per_1m_tokens, currency),
        "per_1m_baseline": fmt.money_unit(row.baseline_per_1m_tokens, currency),
        "per_1m_band": f"{fmt.money_unit(row.lower_per_1m_tokens, currency)} "
        f"\N{EN DASH} {fmt.money_unit(row.upper_per_1m_tokens, currency)}",
        "baseline": fmt.money_unit(row.baseline, currency),
        "band": f"{fmt.money_unit(row.lower, currency)} \N{EN DASH} "
        f"{fmt.money_unit(row.upper, currency)}",
        "clock": CLOCK_LABELS.get(row.clock, row.clock),
        "flag": FLAG_LABELS.get(row.flag, ""),
        "pk": row.pk,
    }


def window_card(w: ScopeWindow) -> dict[str, Any]:
    return {
        "name": w.name,
        "scope": w.scope,
        "currency": w.currency,
        "cost": fmt.money(w.cost, w.currency),
        "requests": fmt.count_short(w.requests),
        "per_1k": fmt.money_unit(w.cost_per_1k_requests, w.currency),
        "per_1k_raw": repr(w.cost_per_1k_requests),
        "per_1m": fmt.money_unit(w.cost_per_1m_tokens, w.currency),
        "idle": fmt.money(w.idle_cost, w.currency),
        "last": last_row(w.last, w.currency),
        "flags": len(w.flagged),
        "clocks": ", ".join(CLOCK_LABELS.get(c, c) for c in w.clocks),
    }


def pool_row(p: PoolIdle) -> dict[str, Any]:
    return {
        "pool": p.pool,
        "idle": fmt.money(p.idle_cost, p.currency),
        "idle_raw": repr(p.idle_cost),
        "cost": fmt.money(p.cost, p.currency),
        "share": fmt.percent(p.idle_share),
    }


def deployment_context(econ: DeploymentEconomics) -> dict[str, Any]:
    """What the deployment page shows of unit economics."""
    return {
        "window": window_card(econ.window) if econ.window else None,
        "pool": pool_row(econ.pool) if econ.pool else None,
        "flags": [flag_row(r) for r in econ.flagged],
    }
