"""The bill as allocated: each UTC day's split and the reads built on it.

The allocation (the pure ``analytics.allocation``) is stored per UTC day by
``costapp.costs.shares`` and read back here; a day whose stored shares are
missing or stale (a run or a rule change since) is allocated on the fly, so a
stale split is never read. The bill days with a scope's part, the billed cost
per deployment and the reconciliation against the rate card read the split
from here; the lines, rules and usage they start from are
``costapp.costs.selectors``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q

from analytics.allocation import (
    IDLE,
    UNALLOCATED,
    BillLine,
    DayAllocation,
    DayUsage,
    PoolUsage,
    Share,
    allocate_day,
)
from costapp.costs.rates import rate_book
from costapp.costs.selectors import (
    DEFAULT_BASIS,
    HOUR_UNITS,
    Basis,
    Rules,
    UsageDay,
    allocation_rules_read,
    cost_lines_read,
    deployments_in_scope_read,
    line_amount,
    nominal_gpu_seconds_read,
    usage_days_read,
)
from costapp.days import utc_midnight
from costapp.models import CostLine, CostShare, CostShareDay, Deployment, IngestRun

# -- allocation ---------------------------------------------------------------


def _bill_line(line: CostLine, basis: Basis) -> BillLine:
    hours = (
        line.usage_quantity
        if line.usage_quantity is not None and line.usage_unit in HOUR_UNITS
        else None
    )
    return BillLine(
        key=str(line.pk),
        amount=line_amount(line, basis),
        usage_type=line.usage_type,
        resource_id=line.resource_id,
        tag_key=line.tag_key,
        tag_value=line.tag_value,
        service=line.service,
        record_type=line.record_type,
        usage_hours=hours,
    )


def allocation_digest(rules: Rules, nominal: Mapping[str, float]) -> str:
    """What an allocation depends on besides bill lines and telemetry: the
    rules, overheads, pools with their members and keys, and each
    deployment's nominal size (unknown GPU-hours count at it). Stored shares
    computed under another digest are stale."""
    text = repr(
        (
            rules.rules,
            rules.overheads,
            [(p.name, p.allocation_key, p.gpus_per_node) for p in rules.pools],
            sorted(rules.members.items()),
            sorted(nominal.items()),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _pool_usages(rules: Rules) -> list[PoolUsage]:
    return [
        PoolUsage(
            p.name,
            key="requests" if p.allocation_key == "requests" else "gpu_hours",
            gpus_per_node=p.gpus_per_node,
            members=rules.members.get(p.name, ()),
        )
        for p in rules.pools
    ]


def day_usages(
    usage: Mapping[tuple[str, date], UsageDay],
) -> dict[date, DayUsage]:
    """``usage_days_read`` regrouped as the allocation's input, per day."""
    gpu_hours: dict[date, dict[str, Decimal]] = defaultdict(dict)
    finished: dict[date, dict[str, Decimal]] = defaultdict(dict)
    for (name, day), u in usage.items():
        gpu_hours[day][name] = u.gpu_hours
        finished[day][name] = u.requests
    return {
        day: DayUsage(gpu_hours=gpu_hours[day], requests=finished[day])
        for day in gpu_hours
    }


def allocations_compute(
    start: date,
    end: date,
    bases: Collection[Basis],
    *,
    rules: Rules | None = None,
    usage: Mapping[tuple[str, date], UsageDay] | None = None,
    days: Collection[date] | None = None,
) -> dict[Basis, dict[tuple[str, date, str], DayAllocation]]:
    """Allocate the bill of ``start``..``end`` (exclusive) from the lines,
    the rules and telemetry as they are now, in each basis; ``days`` keeps
    those days only. This is the reference the stored shares must equal."""
    rules = rules if rules is not None else allocation_rules_read()
    usage = usage if usage is not None else usage_days_read(start, end)
    grouped: dict[tuple[str, date, str], list[CostLine]] = defaultdict(list)
    for line in cost_lines_read(start, end):
        day = line.period_start.date()
        if days is None or day in days:
            grouped[(line.account_id, day, line.currency)].append(line)
    pools = _pool_usages(rules)
    by_day_usage = day_usages(usage)
    empty = DayUsage(gpu_hours={}, requests={})
    out: dict[Basis, dict[tuple[str, date, str], DayAllocation]] = {}
    for basis in bases:
        out[basis] = {
            key: allocate_day(
                lines=[_bill_line(x, basis) for x in lines],
                rules=rules.rules,
                pools=pools,
                overheads=rules.overheads,
                usage=by_day_usage.get(key[1], empty),
            )
            for key, lines in grouped.items()
        }
    return out


def stored_days_read(start: date, end: date, *, digest: str | None = None) -> set[date]:
    """Days of ``start``..``end`` whose stored shares hold: marked (a write
    to a bill line or a deployment-hour of the day drops the mark in its own
    transaction: triggers of migration 0012), computed under the current
    digest, and no ingest run overlapping the day has finished since it was
    computed or is still running (a run that wrote while the day was being
    computed; a Cost Explorer run commits month by month).

    Not seen: a write outside a run that commits while the day is being
    computed, after the compute read it. ``manage.py costs_allocate --all``
    rebuilds.
    """
    if digest is None:
        digest = allocation_digest(allocation_rules_read(), nominal_gpu_seconds_read())
    marks = dict(
        CostShareDay.objects.filter(
            day__gte=start, day__lt=end, rules_digest=digest
        ).values_list("day", "computed_at")
    )
    if not marks:
        return set()
    oldest = min(marks.values())
    runs = IngestRun.objects.filter(
        window_start__lt=utc_midnight(max(marks) + timedelta(days=1)),
        window_end__gt=utc_midnight(min(marks)),
    ).filter(
        Q(status=IngestRun.RUNNING)
        | Q(finished_at__gt=oldest)
        | Q(finished_at__isnull=True, started_at__isnull=False)
    )
    for w_start, w_end, finished in runs.values_list(
        "window_start", "window_end", "finished_at"
    ):
        first = w_start.astimezone(UTC).date()
        last = (w_end - timedelta(microseconds=1)).astimezone(UTC).date()
        for day in [d for d in marks if first <= d <= last]:
            if finished is None or finished > marks[day]:
                del marks[day]
    return set(marks)


def _day_ranges(days: Collection[date]) -> Iterator[tuple[date, date]]:
    """Contiguous ``[start, end)`` runs of ``days``."""
    ordered = sorted(days)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] - ordered[j] == timedelta(1):
            j += 1
        yield ordered[i], ordered[j] + timedelta(days=1)
        i = j + 1


def allocation_days_read(
    start: date, end: date, basis: Basis
) -> dict[tuple[str, date, str], DayAllocation]:
    """(account, UTC day, currency) -> the day's allocation.

    Read from the stored shares (``costapp.costs.shares``, one query) for the
    days ``stored_days_read`` vouches for; every other day of the window (never
    stored, stored before a run or a rule change) is allocated on the fly
    from the lines, exactly as the shares would be. Both give the same
    figures (tests/costs/test_shares.py)."""
    stored = stored_days_read(start, end)
    out: dict[tuple[str, date, str], DayAllocation] = {}
    if stored:
        shares: dict[tuple[str, date, str], list[Share]] = defaultdict(list)
        rows = (
            CostShare.objects.filter(basis=basis, day__gte=start, day__lt=end)
            .order_by("id")
            .values_list(
                "account_id", "day", "currency", "line_id", "target", "amount",
                "how", "pool",
            )
        )  # fmt: skip
        for account, day, currency, line_id, target, amount, how, pool in rows.iterator(
            chunk_size=10000
        ):
            if day in stored:
                shares[(account, day, currency)].append(
                    Share(str(line_id), target, amount, how, pool)  # type: ignore[arg-type]
                )
        for key, items in shares.items():
            out[key] = DayAllocation(
                total=sum((s.amount for s in items), Decimal(0)), shares=tuple(items)
            )
    days = {start + timedelta(days=i) for i in range((end - start).days)} - stored
    if days:
        rules = allocation_rules_read()
        for a, b in _day_ranges(days):
            out.update(allocations_compute(a, b, [basis], rules=rules)[basis])
    return out


def billed_deployment_days_read(
    start: date, end: date, basis: Basis = DEFAULT_BASIS, currency: str = "USD"
) -> dict[tuple[str, date], Decimal]:
    """The allocated bill per deployment and UTC day (``end`` exclusive), only
    for days that have a bill, only deployments that received a share. Pool
    idle and unallocated amounts are not any deployment's. The overview uses
    this to replace its provisional figure once the bill for a day arrives."""
    out: dict[tuple[str, date], Decimal] = {}
    for (_, day, cur), allocation in allocation_days_read(start, end, basis).items():
        if cur != currency:
            continue
        for share in allocation.shares:
            if share.target in {IDLE, UNALLOCATED}:
                continue
            key = (share.target, day)
            out[key] = out.get(key, Decimal(0)) + share.amount
    return out


# -- the bill with its split ----------------------------------------------


@dataclass(frozen=True)
class BillDay:
    day: date
    account_id: str
    currency: str
    total: Decimal
    lines: int
    estimated: bool
    sources: tuple[str, ...]
    review_lines: int = 0  # lines flagged above the plausibility threshold
    # The part allocated to the deployments in scope (None: no filter).
    selected: Decimal | None = None


def bill_days_read(
    start: date,
    end: date,
    basis: Basis,
    *,
    team: str = "",
    deployments: Collection[str] | None = None,
) -> list[BillDay]:
    """Per UTC day, account and currency: the bill total and whether any of
    its lines is still estimated. With ``team``/``deployments``, ``selected``
    is the part of the day's bill allocated to those deployments."""
    scope = deployments_in_scope_read(team=team, deployments=deployments)
    shares: dict[tuple[date, str, str], Decimal] = {}
    if scope is not None:
        for (account, day, cur), allocation in allocation_days_read(
            start, end, basis
        ).items():
            shares[(day, account, cur)] = sum(
                (s.amount for s in allocation.shares if s.target in scope),
                Decimal(0),
            )
    acc: dict[tuple[date, str, str], dict[str, Any]] = {}
    for line in cost_lines_read(start, end):
        key = (line.period_start.date(), line.account_id, line.currency)
        slot = acc.setdefault(
            key,
            {
                "total": Decimal(0),
                "lines": 0,
                "estimated": False,
                "src": set(),
                "review": 0,
            },
        )
        slot["total"] += line_amount(line, basis)
        slot["lines"] += 1
        slot["review"] += line.needs_review
        slot["estimated"] |= line.estimated
        slot["src"].add(line.source)
    return [
        BillDay(
            day,
            account,
            currency,
            s["total"],
            s["lines"],
            s["estimated"],
            tuple(sorted(s["src"])),
            s["review"],
            shares.get((day, account, currency), Decimal(0))
            if scope is not None
            else None,
        )
        for (day, account, currency), s in sorted(acc.items(), reverse=True)
    ]


def bill_total_read(
    start: date,
    end: date,
    basis: Basis,
    *,
    team: str = "",
    deployments: Collection[str] | None = None,
) -> dict[str, Decimal]:
    """Currency -> total, for sanity checks and the export footer; with
    ``team``/``deployments`` the part allocated to those deployments."""
    out: dict[str, Decimal] = {}
    for b in bill_days_read(start, end, basis, team=team, deployments=deployments):
        value = b.total if b.selected is None else b.selected
        out[b.currency] = out.get(b.currency, Decimal(0)) + value
    return out


# -- reconciliation -----------------------------------------------------------


@dataclass(frozen=True)
class ReconciliationRow:
    deployment: str
    day: date
    gpu_hours: Decimal
    rate_per_gpu_hour: Decimal | None
    provisional: Decimal | None
    billed: Decimal | None  # None: no bill for the day yet
    difference: Decimal | None  # billed - provisional

    @property
    def provisional_only(self) -> bool:
        return self.billed is None


def reconciliation_rows_read(
    start: date,
    end: date,
    basis: Basis = DEFAULT_BASIS,
    *,
    team: str = "",
    deployments: Collection[str] | None = None,
) -> list[ReconciliationRow]:
    """Per deployment and day: provisional (measured GPU-hours x the rate card
    that day; pool deployments priced at their pool's node type) beside the
    bill's allocated cost and the difference. Days without a bill carry the
    provisional figure only. ``team``/``deployments`` keep those rows only."""
    scope = deployments_in_scope_read(team=team, deployments=deployments)
    usage = usage_days_read(start, end)
    billed = billed_deployment_days_read(start, end, basis)
    bill_dates = {b.day for b in bill_days_read(start, end, basis)}
    book = rate_book()
    fleet = {d.name: d for d in Deployment.objects.select_related("pool")}
    keys = sorted(set(usage) | set(billed), key=lambda k: (k[1], k[0]), reverse=True)
    rows = []
    for name, day in keys:
        d = fleet.get(name)
        if d is None or (scope is not None and name not in scope):
            continue
        found = book.for_deployment(d, day)
        rate = found[0] if found is not None else None
        hours = usage.get((name, day), UsageDay(Decimal(0), Decimal(0))).gpu_hours
        provisional = hours * rate if rate is not None else None
        bill = billed.get((name, day))
        if bill is None and day in bill_dates:
            bill = Decimal(0)  # the day is billed; nothing of it is this deployment's
        diff = (
            bill - provisional if bill is not None and provisional is not None else None
        )
        rows.append(ReconciliationRow(name, day, hours, rate, provisional, bill, diff))
    return rows


@dataclass(frozen=True)
class ReconciliationDay:
    """One UTC day's bill split the way the page allocates it: what the
    deployments received, pools' idle and what no rule allocated. The three
    add up to the day's bill, to the cent at the bill's precision."""

    day: date
    deployments: Decimal
    idle: Decimal
    unallocated: Decimal

    @property
    def bill(self) -> Decimal:
        return self.deployments + self.idle + self.unallocated


def reconciliation_days_read(
    start: date, end: date, basis: Basis = DEFAULT_BASIS, currency: str = "USD"
) -> list[ReconciliationDay]:
    """Per billed UTC day (newest first), every account's bill in ``currency``."""
    acc: dict[date, list[Decimal]] = {}
    for (_, day, cur), allocation in allocation_days_read(start, end, basis).items():
        if cur != currency:
            continue
        parts = acc.setdefault(day, [Decimal(0), Decimal(0), Decimal(0)])
        for share in allocation.shares:
            slot = {IDLE: 1, UNALLOCATED: 2}.get(share.target, 0)
            parts[slot] += share.amount
    return [ReconciliationDay(day, *acc[day]) for day in sorted(acc, reverse=True)]


@dataclass(frozen=True)
class ReconciliationTotals:
    gpu_hours: Decimal
    provisional: Decimal
    billed: Decimal
    # Over the rows that have both: a day without a bill is not a difference.
    difference: Decimal
    rows_compared: int


def reconciliation_totals(rows: list[ReconciliationRow]) -> ReconciliationTotals:
    compared = [r for r in rows if r.difference is not None]
    return ReconciliationTotals(
        gpu_hours=sum((r.gpu_hours for r in rows), Decimal(0)),
        provisional=sum((r.provisional or Decimal(0) for r in rows), Decimal(0)),
        billed=sum((r.billed or Decimal(0) for r in rows), Decimal(0)),
        difference=sum((r.difference or Decimal(0) for r in compared), Decimal(0)),
        rows_compared=len(compared),
    )
