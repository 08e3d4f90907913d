"""Reads of the cost breakdown page: where the bill of a window went.

Spend by service, usage type and cost allocation tag comes straight from the
bill lines; by deployment, team and pool from the allocation (the same pass
the finance export makes, so the page and the file agree to the cent), with
``__idle__`` and ``__unallocated__`` as slices of their own. Per day the bill
stands beside the rate card's provisional cost of the same deployment-days.
Amounts in different currencies are never added: every slice has one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from analytics.allocation import IDLE, UNALLOCATED
from costapp.costs.allocations import allocation_days_read
from costapp.costs.export.build import Export, ExportSpec
from costapp.costs.export.rows import ESTIMATED, FINAL, PROVISIONAL
from costapp.costs.rates import rate_book
from costapp.costs.selectors import (
    Basis,
    cost_lines_read,
    deployments_in_scope_read,
    line_amount,
    usage_days_read,
)
from costapp.formatting import MISSING, money, percent
from costapp.models import CostLine, Deployment

DIMENSIONS = {
    "service": "service",
    "usage_type": "usage type",
    "team": "team",
    "pool": "pool",
    "deployment": "deployment",
    "tag": "cost allocation tag",
}
TOP = 15  # slices shown per dimension; the rest are summed as "other"
NO_POOL, NO_TEAM, UNTAGGED, OTHER = "(no pool)", "(no team)", "(untagged)", "(other)"


@dataclass(frozen=True)
class Slice:
    name: str
    currency: str
    amount: Decimal
    share: float | None  # of the currency's bill in the window
    special: bool = False  # idle or unallocated: money that buys nothing known

    @property
    def amount_text(self) -> str:
        return money(self.amount, self.currency)

    @property
    def share_text(self) -> str:
        return percent(self.share)


@dataclass(frozen=True)
class BreakdownDay:
    day: date
    currency: str
    status: str  # final | estimated | provisional
    bill: Decimal | None  # None: no bill for the day yet
    allocated: Decimal | None  # the part of the bill that is a deployment's
    provisional: Decimal | None  # rate card x measured GPU-hours, deployments
    difference: Decimal | None  # allocated - provisional

    def text(self, value: Decimal | None) -> str:
        return MISSING if value is None else money(value, self.currency)

    @property
    def bill_text(self) -> str:
        return self.text(self.bill)

    @property
    def allocated_text(self) -> str:
        return self.text(self.allocated)

    @property
    def provisional_text(self) -> str:
        return self.text(self.provisional)

    @property
    def difference_text(self) -> str:
        return self.text(self.difference)


@dataclass(frozen=True)
class Breakdown:
    start: date
    end: date
    basis: Basis
    totals: dict[str, Decimal]  # currency -> bill in the window
    dimensions: dict[str, list[Slice]]
    days: list[BreakdownDay]
    estimated_days: list[date]
    provisional_days: list[date]
    idle: list[Slice]
    unallocated: list[Slice]
    scoped: bool = False  # only the bill allocated to the chosen deployments

    @property
    def totals_text(self) -> list[tuple[str, str]]:
        """(currency, the bill in it) per currency."""
        return [(c, money(v, c)) for c, v in sorted(self.totals.items())]


def _slices(
    sums: dict[tuple[str, str], Decimal],
    totals: dict[str, Decimal],
    top: int = TOP,
) -> list[Slice]:
    out: list[Slice] = []
    by_currency: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
    for (currency, name), amount in sums.items():
        by_currency[currency].append((name, amount))
    for currency, items in sorted(by_currency.items()):
        items.sort(key=lambda x: (-abs(x[1]), x[0]))
        kept, rest = items[:top], items[top:]
        if rest:
            kept.append((OTHER, sum((a for _, a in rest), Decimal(0))))
        total = totals.get(currency)
        for name, amount in kept:
            share = float(amount / total) if total else None
            special = name in (IDLE, UNALLOCATED) or name.endswith(f"/{IDLE}")
            out.append(Slice(name, currency, amount, share, special))
    return out


def _add_line(
    sums: dict[str, dict[tuple[str, str], Decimal]], line: CostLine, amount: Decimal
) -> None:
    c = line.currency
    sums["service"][(c, line.service or "(no service)")] += amount
    sums["usage_type"][(c, line.usage_type or "(no usage type)")] += amount
    tag = f"{line.tag_key}={line.tag_value}" if line.tag_key else UNTAGGED
    sums["tag"][(c, tag)] += amount


Sums = dict[str, dict[tuple[str, str], Decimal]]
DayKey = tuple[date, str]  # a UTC day and a currency


@dataclass
class _Tally:
    """What the breakdown adds up as it reads: the bill per currency, per
    slice of each dimension, and per day and currency with the day's status."""

    totals: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    sums: Sums = field(
        default_factory=lambda: {k: defaultdict(Decimal) for k in DIMENSIONS}
    )
    day_bill: dict[DayKey, Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    day_allocated: dict[DayKey, Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    status: dict[DayKey, str] = field(default_factory=dict)
    estimated: set[date] = field(default_factory=set)
    provisional_days: set[date] = field(default_factory=set)


def breakdown_read(
    *,
    start: date,
    end: date,
    basis: Basis,
    team: str = "",
    deployments: Collection[str] | None = None,
) -> Breakdown:
    """The window's bill by each dimension, and day by day beside the rate
    card (``end`` exclusive, UTC days). With ``team``/``deployments``: only
    the part of the bill allocated to those deployments (each bill line's
    share of it by service, usage type and tag); idle and unallocated are
    nobody's and drop out."""
    scope = deployments_in_scope_read(team=team, deployments=deployments)
    tally = _Tally()
    _bill_by_line_read(tally, start=start, end=end, basis=basis, scope=scope)
    _bill_by_target_read(tally, start=start, end=end, basis=basis, scope=scope)
    provisional = _provisional_by_day_read(start, end, scope)
    all_slices = {dim: _slices(s, tally.totals) for dim, s in tally.sums.items()}
    return Breakdown(
        start=start,
        end=end,
        basis=basis,
        totals=dict(tally.totals),
        dimensions=all_slices,
        days=_breakdown_days(tally, provisional),
        estimated_days=sorted(tally.estimated),
        provisional_days=sorted(tally.provisional_days),
        idle=[s for s in all_slices["pool"] if s.name.endswith(f"/{IDLE}")],
        unallocated=[s for s in all_slices["deployment"] if s.name == UNALLOCATED],
        scoped=scope is not None,
    )


def _bill_by_line_read(
    tally: _Tally, *, start: date, end: date, basis: Basis, scope: set[str] | None
) -> None:
    """The bill per currency and by service, usage type and tag, from the
    lines themselves, or from the shares of them allocated to ``scope``."""
    if scope is None:
        for line in cost_lines_read(start, end):
            amount = line_amount(line, basis)
            tally.totals[line.currency] += amount
            _add_line(tally.sums, line, amount)
        return
    lines = {str(x.pk): x for x in cost_lines_read(start, end)}
    for allocation in allocation_days_read(start, end, basis).values():
        for share in allocation.shares:
            if share.target in scope:
                line = lines[share.line_key]
                tally.totals[line.currency] += share.amount
                _add_line(tally.sums, line, share.amount)


def _bill_by_target_read(
    tally: _Tally, *, start: date, end: date, basis: Basis, scope: set[str] | None
) -> None:
    """The bill by deployment, team and pool and per day, from the finance
    export's rows by day (the same pass, so the page and the file agree)."""
    teams = dict(Deployment.objects.values_list("name", "team"))
    export = Export(ExportSpec(start=start, end=end, basis=basis))
    for row in export.records():
        _add_export_row(tally, row, scope, teams)


def _add_export_row(
    tally: _Tally, r: dict[str, Any], scope: set[str] | None, teams: dict[str, str]
) -> None:
    sums = tally.sums
    day, c, target, amount = (
        r["period_start"],
        r["currency"],
        r["target"],
        r["bill_amount"],
    )
    if r["status"] == ESTIMATED:
        tally.estimated.add(day)
    if r["status"] == PROVISIONAL:
        tally.provisional_days.add(day)
        tally.status.setdefault((day, c), PROVISIONAL)
        return
    if tally.status.get((day, c)) != ESTIMATED:
        tally.status[(day, c)] = r["status"]
    if amount is None:
        return
    if scope is not None and target not in scope:
        tally.day_bill.setdefault((day, c), Decimal(0))
        return
    tally.day_bill[(day, c)] += amount
    if target == IDLE:
        sums["pool"][(c, f"{r['pool']}/{IDLE}")] += amount
        sums["deployment"][(c, IDLE)] += amount
        sums["team"][(c, IDLE)] += amount
        return
    if target == UNALLOCATED:
        for dim in ("pool", "deployment", "team"):
            sums[dim][(c, UNALLOCATED)] += amount
        return
    tally.day_allocated[(day, c)] += amount
    sums["deployment"][(c, target)] += amount
    sums["team"][(c, teams.get(target) or NO_TEAM)] += amount
    sums["pool"][(c, r["pool"] or NO_POOL)] += amount


def _breakdown_days(
    tally: _Tally, provisional: dict[DayKey, Decimal]
) -> list[BreakdownDay]:
    """Each day and currency, latest first: the bill (none while the day is
    provisional), its allocated part, the rate card's cost beside it."""
    days = []
    for key in sorted(set(tally.status) | set(provisional), reverse=True):
        day, c = key
        status = tally.status.get(key, PROVISIONAL)
        bill = tally.day_bill.get(key) if status != PROVISIONAL else None
        allocated = tally.day_allocated.get(key) if bill is not None else None
        prov = provisional.get(key)
        diff = allocated - prov if allocated is not None and prov is not None else None
        days.append(BreakdownDay(day, c, status, bill, allocated, prov, diff))
    return days


def _provisional_by_day_read(
    start: date, end: date, scope: set[str] | None = None
) -> dict[tuple[date, str], Decimal]:
    """Rate card x measured GPU-hours per UTC day, deployments with a card
    (those in ``scope``, if given)."""
    book = rate_book()
    fleet = {d.name: d for d in Deployment.objects.select_related("pool")}
    out: dict[tuple[date, str], Decimal] = defaultdict(Decimal)
    for (name, day), use in usage_days_read(start, end).items():
        if scope is not None and name not in scope:
            continue
        dep = fleet.get(name)
        rate = book.for_deployment(dep, day) if dep is not None else None
        if rate is not None:
            out[(day, rate[1])] += use.gpu_hours * rate[0]
    return dict(out)


@dataclass(frozen=True)
class BillLineRow:
    line: CostLine
    amount: Decimal

    @property
    def amount_text(self) -> str:
        return money(self.amount, self.line.currency, places=4)


def day_lines_read(*, day: date, account: str = "") -> Iterator[CostLine]:
    """The bill lines of one UTC day as stored (an account's, if given)."""
    for line in cost_lines_read(day, day + timedelta(days=1)):
        if not account or line.account_id == account:
            yield line


def bill_lines_read(
    *, day: date, basis: Basis, account: str = "", limit: int = 2000
) -> tuple[list[BillLineRow], int]:
    """The bill lines of one UTC day (the drill-down), largest first, and how
    many there are in all."""
    rows = [
        BillLineRow(line, line_amount(line, basis))
        for line in day_lines_read(day=day, account=account)
    ]
    rows.sort(key=lambda r: (-abs(r.amount), r.line.pk))
    return rows[:limit], len(rows)


def day_chart(b: Breakdown, currency: str = "USD") -> dict[str, Any]:
    """The bill per UTC day (final and estimated days apart) beside the rate
    card's provisional cost, as plotly figure JSON. Days without a bill have
    no bar (missing, not zero)."""
    days = sorted((d for d in b.days if d.currency == currency), key=lambda d: d.day)
    hover = (
        f"%{{x|%Y-%m-%d}} UTC: %{{y:,.2f}} {currency}<extra>%{{fullData.name}}</extra>"
    )

    def bars(status: str, name: str, color: str) -> dict[str, Any]:
        picked = [d for d in days if d.status == status and d.bill is not None]
        return {
            "type": "bar",
            "name": name,
            "x": [d.day.isoformat() for d in picked],
            "y": [float(d.bill or 0) for d in picked],
            "marker": {"color": color},
            "hovertemplate": hover,
        }

    provisional = [d for d in days if d.provisional is not None]
    data = [
        bars(FINAL, "bill (final)", "#2563eb"),
        bars(ESTIMATED, "bill (estimated)", "#f59e0b"),
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "provisional (rate card x GPU-hours)",
            "x": [d.day.isoformat() for d in provisional],
            "y": [float(d.provisional or 0) for d in provisional],
            "line": {"color": "#475569", "width": 2, "dash": "dot"},
            "marker": {"size": 4},
            "hovertemplate": hover,
        },
    ]
    title = "Bill per UTC day" + (" allocated to the selection" if b.scoped else "")
    layout = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "font": {"family": 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif'},
        "margin": {"l": 72, "r": 16, "t": 44, "b": 40},
        "height": 300,
        "barmode": "overlay",
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.18},
        "xaxis": {"type": "date", "title": {"text": "UTC day"}, "gridcolor": "#eef2f7"},
        "yaxis": {
            "title": {"text": f"{currency} per day"},
            "tickformat": ",.0f",
            "rangemode": "tozero",
            "gridcolor": "#eef2f7",
        },
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
    }
    return {"data": data, "layout": layout}
