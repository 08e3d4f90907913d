"""Savings-plan and reserved-instance coverage and utilisation on the bills page:
the bill lines read here, the arithmetic in ``analytics.commitments``, the
words and numbers the page shows (docs/costs.md, "Commitments").

Commitments belong to the whole bill (a savings plan covers any linked
account's usage), so the figures are never filtered by team or deployment.
Months are read whole, so a month's figure is the month's, not the window's
slice of it; days are the window's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from analytics.commitments import HOURS, ON_DEMAND, CommitmentFigures
from analytics.commitments import commitment_figures as figures_compute
from costapp.costs.selectors import cost_lines_read
from costapp.days import iso_day, utc_midnight
from costapp.formatting import MISSING, money, number, percent
from costapp.models import CostLine

KIND_LABELS = {"savings_plan": "savings plans", "reserved": "reserved instances"}
NONE_TEXT = "no savings plans or reserved instances in this bill"


@dataclass(frozen=True)
class CommitmentRow:
    """One period and kind of commitment as the page shows it."""

    period: str
    kind: str
    status: str  # "partial" (still in progress or not wholly billed) or "final"
    coverage: str
    basis: str  # what coverage is measured in, and of what
    covered: str
    eligible: str
    utilisation: str
    used: str
    unused: str
    paid: str
    currency: str = "USD"


@dataclass(frozen=True)
class Commitments:
    months: list[CommitmentRow]
    days: list[CommitmentRow]
    services: list[str]  # where commitments covered usage: the eligible usage's


def _decimal(value: Decimal | None) -> float:
    return float("nan") if value is None else float(value)


def _on_demand(line: CostLine) -> float:
    """What the line's usage would cost at on-demand rates, NaN if unknown.

    FOCUS gives every row its ListCost. Cost Explorer prices a savings plan's
    covered usage at on-demand rates in unblended cost, but a reserved
    instance's at 0, with no on-demand metric: unknown, never 0."""
    if line.source == "focus":
        return _decimal(line.list_cost)
    if line.commitment == "reserved" and line.record_type == "usage":
        return float("nan")
    return _decimal(line.unblended_cost)


def _month_start(day: date) -> date:
    return day.replace(day=1)


def _next_month(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def _frame(lines: Iterable[CostLine], services: set[str]) -> pd.DataFrame:
    rows = [
        {
            "day": line.period_start.date(),
            "currency": line.currency,
            "service": line.service,
            "record_type": line.record_type,
            "commitment": line.commitment,
            "usage_unit": line.usage_unit,
            "on_demand": _on_demand(line),
            "amortized": _decimal(line.amortized_cost),
            "quantity": _decimal(line.usage_quantity),
            "estimated": line.estimated,
        }
        for line in lines
        if line.service in services
    ]
    return pd.DataFrame(rows)


def _partial_months(frame: pd.DataFrame) -> set[str]:
    """Months the bill does not hold whole: still in progress or lagging (its
    newest day is before the month's last), begun before the bill's first
    day, or with a day still estimated."""
    first, last = min(frame["day"]), max(frame["day"])
    out = set(frame.loc[frame["estimated"], "month"])
    for month in set(frame["month"]):
        start = date.fromisoformat(f"{month}-01")
        if start < first or _next_month(start) - timedelta(days=1) > last:
            out.add(month)
    return out


def _coverage_text(f: CommitmentFigures) -> tuple[str, str, str]:
    """(basis, covered, eligible) in the basis' unit."""
    if f.coverage_basis == ON_DEMAND:
        return (
            "on-demand equivalent $",
            money(f.covered, f.currency),
            money(f.eligible, f.currency),
        )
    if f.coverage_basis == HOURS:
        return "hours", f"{number(f.covered, 0)} h", f"{number(f.eligible, 0)} h"
    return "not measured (no on-demand equivalent, not hours)", MISSING, MISSING


def _row(f: CommitmentFigures) -> CommitmentRow:
    basis, covered, eligible = _coverage_text(f)
    return CommitmentRow(
        period=str(f.period),
        kind=KIND_LABELS[f.commitment],
        status="partial" if f.partial else "final",
        coverage=percent(f.coverage),
        basis=basis,
        covered=covered,
        eligible=eligible,
        utilisation=percent(f.utilisation),
        used=money(f.used, f.currency),
        unused=money(f.unused, f.currency),
        paid=money(f.commitment_cost, f.currency),
        currency=f.currency,
    )


def commitments_read(start: date, end: date) -> Commitments | None:
    """Coverage and utilisation by month (the months the window touches,
    whole) and by UTC day of ``start``..``end`` (exclusive); None when no
    line of those months belongs to a savings plan or reserved instance."""
    first, stop = _month_start(start), _next_month(end - timedelta(days=1))
    window = CostLine.objects.filter(
        period_start__gte=utc_midnight(first), period_start__lt=utc_midnight(stop)
    )
    # Only the services holding a commitment's lines can hold its eligible
    # usage (analytics.commitments): the rest of the bill is not read.
    services = set(
        window.exclude(commitment="").values_list("service", flat=True).distinct()
    )
    if not services:
        return None
    frame = _frame(cost_lines_read(first, stop), services)
    if frame.empty:  # only hourly lines of days whose daily lines count instead
        return None
    frame["month"] = [f"{d:%Y-%m}" for d in frame["day"]]
    months = figures_compute(
        frame.assign(period=frame["month"]), partial=_partial_months(frame)
    )
    in_window = frame[(frame["day"] >= start) & (frame["day"] < end)]
    estimated_days = {iso_day(d) for d in in_window.loc[in_window["estimated"], "day"]}
    days = figures_compute(
        in_window.assign(period=[iso_day(d) for d in in_window["day"]]),
        partial=estimated_days,
    )
    return Commitments(
        months=[_row(f) for f in months],
        days=[_row(f) for f in days],
        services=sorted(services),
    )
