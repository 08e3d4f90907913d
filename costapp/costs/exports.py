"""Finance exports: the allocated bill per day or month, streamed.

One row per period, account, currency and target (a deployment or a team,
``__idle__`` per pool, ``__unallocated__``), so the ``bill_amount`` column of an
account-month sums exactly to the stored bill of that basis. Days without a
bill for the account are *provisional*: their rate-card cost goes in
``provisional_cost`` and the bill column stays empty (a provisional figure is
never added to a bill total). A day with any estimated line is *estimated*.

Rows come from a generator: the window is read one month at a time and bill
lines one day at a time over ``QuerySet.iterator()``, so memory does not grow
with the window (tests/costs/test_exports.py measures 1 against 12 months).
The companion summary (days covered, missing and estimated; the exported bill
against the stored one) is built during the same pass and written last.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa
from django.db.models import Sum
from django.db.models.functions import TruncDate

from analytics.allocation import IDLE, UNALLOCATED, DayUsage, PoolUsage, allocate_day
from costapp.costs.rates import rate_book
from costapp.costs.selectors import (
    NOMINAL_LABEL,
    Basis,
    Rules,
    UsageDay,
    _bill_line,
    _lines,
    allocation_rules,
    usage_days,
    utc_day_start,
)
from costapp.models import CostLine, Deployment, DeploymentHour

Grain = Literal["day", "month"]
By = Literal["deployment", "team"]
Format = Literal["csv", "parquet"]
QUANTUM = Decimal("1e-12")
NO_TEAM = "__no_team__"
# A billed day with the deployment's traffic but none of the bill: $0.
NO_SHARE = "no share"
PROVISIONAL, ESTIMATED, FINAL = "provisional", "estimated", "final"
ROW_GROUP = 5000

MONEY = pa.decimal128(28, 12)
# (column, Parquet type). Money is decimal128(28, 12) (float64 loses cents
# above about $1M at ten decimals); counts are float64 as telemetry holds them.
SCHEMA_FIELDS: list[tuple[str, pa.DataType]] = [
    ("period_start", pa.date32()),
    ("period_days", pa.int32()),
    ("account_id", pa.string()),
    ("currency", pa.string()),
    ("basis", pa.string()),
    ("target", pa.string()),
    ("pool", pa.string()),
    ("allocation", pa.string()),
    ("status", pa.string()),
    ("days_final", pa.int32()),
    ("days_estimated", pa.int32()),
    ("days_provisional", pa.int32()),
    ("bill_amount", MONEY),
    ("provisional_cost", MONEY),
    ("requests", pa.float64()),
    ("prompt_tokens", pa.float64()),
    ("generation_tokens", pa.float64()),
    ("gpu_hours", pa.float64()),
    ("nominal_gpu_hours", pa.int32()),
    ("cost_per_1k_requests", MONEY),
    ("cost_per_1m_tokens", MONEY),
    ("cost_per_gpu_hour", MONEY),
]
SUMMARY_COLUMNS = [
    "window_start",
    "window_last_day",
    "grain",
    "by",
    "basis",
    "days_in_window",
    "account_id",
    "currency",
    "days_billed",
    "days_final",
    "days_estimated",
    "days_missing",
    "estimated_days",
    "missing_days",
    "bill_total_stored",
    "bill_total_exported",
    "difference",
    "provisional_cost_total",
    "rows",
]


@dataclass(frozen=True)
class ExportSpec:
    start: date
    end: date  # exclusive, as Cost Explorer's
    grain: Grain = "day"
    by: By = "deployment"
    basis: Basis = "amortized"
    format: Format = "csv"

    @property
    def last_day(self) -> date:
        return self.end - timedelta(days=1)

    @property
    def columns(self) -> list[str]:
        return [self.by if c == "target" else c for c, _ in SCHEMA_FIELDS]


@dataclass(frozen=True)
class Coverage:
    """Which account-days have a bill, and which of them are estimated."""

    days: tuple[date, ...]
    billed: dict[str, set[date]]
    estimated: dict[str, set[date]]

    def missing(self, account: str) -> list[date]:
        have = self.billed.get(account, set())
        return [d for d in self.days if d not in have]

    @property
    def complete(self) -> bool:
        return bool(self.billed) and all(not self.missing(a) for a in self.billed)


def coverage_read(start: date, end: date) -> Coverage:
    lines = CostLine.objects.filter(
        period_start__gte=utc_day_start(start), period_start__lt=utc_day_start(end)
    )
    billed: dict[str, set[date]] = defaultdict(set)
    estimated: dict[str, set[date]] = defaultdict(set)
    days = lines.annotate(d=TruncDate("period_start", tzinfo=UTC)).values_list(
        "account_id", "d"
    )
    for account, day in days.distinct().iterator():
        billed[account].add(day)
    for account, day in days.filter(estimated=True).distinct().iterator():
        estimated[account].add(day)
    span = tuple(start + timedelta(days=i) for i in range((end - start).days))
    return Coverage(span, dict(billed), dict(estimated))


def file_stem(spec: ExportSpec, coverage: Coverage) -> str:
    stem = (
        f"costapp-{spec.start}-to-{spec.last_day}-{spec.grain}-{spec.by}-{spec.basis}"
    )
    return stem if coverage.complete else stem + "-incomplete"


# -- rows ---------------------------------------------------------------------


@dataclass
class _Row:
    period: date
    account: str
    currency: str
    target: str
    pool: str
    hows: set[str] = field(default_factory=set)
    bill: Decimal | None = None
    provisional: Decimal | None = None
    days: dict[str, set[date]] = field(
        default_factory=lambda: {FINAL: set(), ESTIMATED: set(), PROVISIONAL: set()}
    )
    requests: float | None = None
    prompt: float | None = None
    generation: float | None = None
    gpu_hours: float | None = None
    nominal: int = 0

    def add_bill(self, amount: Decimal) -> None:
        self.bill = amount if self.bill is None else self.bill + amount

    def add_provisional(self, amount: Decimal) -> None:
        self.provisional = (
            amount if self.provisional is None else self.provisional + amount
        )

    def add_traffic(self, usage: UsageDay | None, tokens: tuple[float, float]) -> None:
        def plus(a: float | None, b: float) -> float:
            return b if a is None else a + b

        if usage is not None:
            self.requests = plus(self.requests, float(usage.requests))
            self.gpu_hours = plus(self.gpu_hours, float(usage.gpu_hours))
            self.nominal += usage.nominal_hours
        self.prompt = plus(self.prompt, tokens[0])
        self.generation = plus(self.generation, tokens[1])


def _ratio(cost: Decimal | None, amount: float | None, per: int) -> Decimal | None:
    # Never divide by zero requests: no traffic is no unit cost, not infinity.
    if cost is None or not amount:
        return None
    return (cost * per / Decimal(repr(amount))).quantize(QUANTUM)


def _q(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(QUANTUM)


def _status(days: dict[str, set[date]]) -> str:
    for status in (PROVISIONAL, ESTIMATED):
        if days[status]:
            return status
    return FINAL


def _record(row: _Row, spec: ExportSpec, period_days: int) -> dict[str, Any]:
    cost = row.bill
    if row.provisional is not None:
        cost = row.provisional if cost is None else cost + row.provisional
    tokens = (
        None
        if row.prompt is None or row.generation is None
        else row.prompt + row.generation
    )
    return {
        "period_start": row.period,
        "period_days": period_days,
        "account_id": row.account,
        "currency": row.currency,
        "basis": spec.basis,
        "target": row.target,
        "pool": row.pool,
        "allocation": "; ".join(sorted(row.hows)),
        "status": _status(row.days),
        "days_final": len(row.days[FINAL]),
        "days_estimated": len(row.days[ESTIMATED]),
        "days_provisional": len(row.days[PROVISIONAL]),
        "bill_amount": _q(row.bill),
        "provisional_cost": _q(row.provisional),
        "requests": row.requests,
        "prompt_tokens": row.prompt,
        "generation_tokens": row.generation,
        "gpu_hours": row.gpu_hours,
        "nominal_gpu_hours": row.nominal,
        "cost_per_1k_requests": _ratio(cost, row.requests, 1000),
        "cost_per_1m_tokens": _ratio(cost, tokens, 1_000_000),
        "cost_per_gpu_hour": _ratio(cost, row.gpu_hours, 1),
    }


def _months(start: date, end: date) -> Iterator[tuple[date, date]]:
    a = start
    while a < end:
        nxt = (a.replace(day=1) + timedelta(days=32)).replace(day=1)
        b = min(nxt, end)
        yield a, b
        a = b


def _tokens(a: date, b: date) -> dict[tuple[str, date], tuple[float, float]]:
    rows = (
        DeploymentHour.objects.filter(
            hour__gte=utc_day_start(a), hour__lt=utc_day_start(b)
        )
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values_list("deployment__name", "day")
        .annotate(p=Sum("prompt_tokens"), g=Sum("generation_tokens"))
        .order_by()
    )
    return {
        (n, d): (float(p or 0.0), float(g or 0.0)) for n, d, p, g in rows.iterator()
    }


@dataclass
class _Totals:
    """What the summary reconciles: per (account, currency)."""

    exported: dict[tuple[str, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    stored: dict[tuple[str, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    provisional: dict[tuple[str, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    rows: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


class Export:
    """One export: iterate ``records()`` once, then read ``summary_rows()``."""

    def __init__(self, spec: ExportSpec) -> None:
        self.spec = spec
        self.coverage = coverage_read(spec.start, spec.end)
        self.totals = _Totals()
        self.stem = file_stem(spec, self.coverage)
        self._fleet = {
            d.name: d
            for d in Deployment.objects.select_related("pool").order_by("name")
        }

    def _target(self, name: str) -> str:
        if self.spec.by == "team" and name not in (IDLE, UNALLOCATED):
            dep = self._fleet.get(name)
            return (dep.team if dep is not None else "") or NO_TEAM
        return name

    def records(self) -> Iterator[dict[str, Any]]:
        rules = allocation_rules()
        book = rate_book()
        for a, b in _months(self.spec.start, self.spec.end):
            if self.spec.grain == "month":
                rows: dict[tuple[Any, ...], _Row] = {}
                for day_rows in self._days(a, b, rules, book):
                    for r in day_rows:
                        key = (r.account, r.currency, r.target, r.pool)
                        self._merge(rows, key, r, a)
                yield from self._emit(rows.values(), (b - a).days)
            else:
                for day_rows in self._days(a, b, rules, book):
                    yield from self._emit(day_rows, 1)

    @staticmethod
    def _merge(
        rows: dict[tuple[Any, ...], _Row], key: tuple[Any, ...], r: _Row, period: date
    ) -> None:
        into = rows.get(key)
        if into is None:
            r.period = period
            rows[key] = r
            return
        into.hows |= r.hows
        if r.bill is not None:
            into.add_bill(r.bill)
        if r.provisional is not None:
            into.add_provisional(r.provisional)
        for status, days in r.days.items():
            into.days[status] |= days
        for name in ("requests", "prompt", "generation", "gpu_hours"):
            value = getattr(r, name)
            if value is not None:
                old = getattr(into, name)
                setattr(into, name, value if old is None else old + value)
        into.nominal += r.nominal

    def _emit(self, rows: Iterable[_Row], period_days: int) -> Iterator[dict[str, Any]]:
        for row in sorted(
            rows, key=lambda r: (r.account, r.currency, r.target, r.pool)
        ):
            key = (row.account, row.currency)
            self.totals.rows[key] += 1
            if row.bill is not None:
                self.totals.exported[key] += row.bill
            if row.provisional is not None:
                self.totals.provisional[key] += row.provisional
            record = _record(row, self.spec, period_days)
            yield record

    def _days(self, a: date, b: date, rules: Rules, book: Any) -> Iterator[list[_Row]]:
        """Rows of each day of [a, b), one day at a time."""
        usage = usage_days(a, b)
        tokens = _tokens(a, b)
        by_day: dict[date, list[str]] = defaultdict(list)
        for name, day in set(usage) | set(tokens):
            by_day[day].append(name)
        pools = [
            PoolUsage(
                p.name,
                key="requests" if p.allocation_key == "requests" else "gpu_hours",
                gpus_per_node=p.gpus_per_node,
                members=rules.members.get(p.name, ()),
            )
            for p in rules.pools
        ]
        groups = itertools.groupby(
            _lines(a, b), key=lambda line: line.period_start.date()
        )
        pending = next(groups, None)
        day = a
        while day < b:
            lines: list[CostLine] = []
            if pending is not None and pending[0] == day:
                lines = list(pending[1])
                pending = next(groups, None)
            yield self._day(
                day,
                lines,
                usage,
                tokens,
                sorted(by_day.get(day, [])),
                rules,
                pools,
                book,
            )
            day += timedelta(days=1)

    def _day(
        self,
        day: date,
        lines: list[CostLine],
        usage: dict[tuple[str, date], UsageDay],
        tokens: dict[tuple[str, date], tuple[float, float]],
        active: list[str],
        rules: Rules,
        pools: list[PoolUsage],
        book: Any,
    ) -> list[_Row]:
        basis = self.spec.basis
        day_usage = DayUsage(
            gpu_hours={
                n: usage[(n, day)].gpu_hours for n in active if (n, day) in usage
            },
            requests={n: usage[(n, day)].requests for n in active if (n, day) in usage},
        )
        grouped: dict[tuple[str, str], list[CostLine]] = defaultdict(list)
        for line in lines:
            grouped[(line.account_id, line.currency)].append(line)
        rows: dict[tuple[str, str, str, str], _Row] = {}
        # Which row carries each deployment's traffic (exactly one per day).
        traffic_row: dict[str, _Row] = {}
        for (account, currency), account_lines in sorted(grouped.items()):
            status = (
                ESTIMATED
                if day in self.coverage.estimated.get(account, set())
                else FINAL
            )
            bill_lines = [_bill_line(x, basis) for x in account_lines]
            self.totals.stored[(account, currency)] += sum(
                (x.amount for x in bill_lines), Decimal(0)
            )
            allocation = allocate_day(
                lines=bill_lines,
                rules=rules.rules,
                pools=pools,
                overheads=rules.overheads,
                usage=day_usage,
            )
            for share in allocation.shares:
                target = self._target(share.target)
                key = (account, currency, target, share.pool)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = _Row(day, account, currency, target, share.pool)
                    row.days[status].add(day)
                row.hows.add(share.how)
                row.add_bill(share.amount)
                if share.target not in (IDLE, UNALLOCATED):
                    dep = self._fleet.get(share.target)
                    home = dep.account_id if dep is not None else ""
                    if share.target not in traffic_row or account == home:
                        traffic_row[share.target] = row
        billed_accounts = sorted({a for a, _ in grouped})
        for name in active:
            dep = self._fleet.get(name)
            if dep is None:
                continue
            use = usage.get((name, day))
            home = dep.account_id
            billed = home in billed_accounts if home else bool(billed_accounts)
            pool_name = dep.pool.name if dep.pool else ""
            row = traffic_row.get(name)
            if billed and row is None:
                # The day is billed and none of it is this deployment's: $0.
                account = home or billed_accounts[0]
                currency = next(c for a, c in sorted(grouped) if a == account)
                key = (account, currency, self._target(name), pool_name)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = _Row(day, *key)
                    status = (
                        ESTIMATED
                        if day in self.coverage.estimated.get(account, set())
                        else FINAL
                    )
                    row.days[status].add(day)
                    row.add_bill(Decimal(0))
                    row.hows.add(NO_SHARE)
            elif not billed:
                rate = book.for_deployment(dep, day)
                currency = rate[1] if rate is not None else "USD"
                key = (home, currency, self._target(name), pool_name)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = _Row(day, *key)
                    row.days[PROVISIONAL].add(day)
                row.hows.add("rate card")
                if rate is not None and use is not None:
                    row.add_provisional((use.gpu_hours * rate[0]).quantize(QUANTUM))
            assert row is not None
            if use is not None and use.nominal_hours:
                row.hows.add(NOMINAL_LABEL.format(n=use.nominal_hours))
            row.add_traffic(use, tokens.get((name, day), (0.0, 0.0)))
        return list(rows.values())

    def summary_rows(self) -> Iterator[list[Any]]:
        spec, cov, t = self.spec, self.coverage, self.totals
        keys = sorted(set(t.rows) | set(t.stored))
        for account in sorted(cov.billed):
            if not any(a == account for a, _ in keys):
                keys.append((account, ""))
        if not keys:
            keys = [("", "")]
        for account, currency in keys:
            missing = cov.missing(account)
            estimated = sorted(cov.estimated.get(account, set()))
            billed = len(cov.days) - len(missing)
            yield [
                spec.start,
                spec.last_day,
                spec.grain,
                spec.by,
                spec.basis,
                len(cov.days),
                account,
                currency,
                billed,
                billed - len(estimated),
                len(estimated),
                len(missing),
                day_ranges(estimated),
                day_ranges(missing),
                _q(t.stored.get((account, currency), Decimal(0))),
                _q(t.exported.get((account, currency), Decimal(0))),
                _q(
                    t.exported.get((account, currency), Decimal(0))
                    - t.stored.get((account, currency), Decimal(0))
                ),
                _q(t.provisional.get((account, currency), Decimal(0))),
                t.rows.get((account, currency), 0),
            ]


def day_ranges(days: list[date]) -> str:
    """``2026-11-01..2026-11-03 2026-11-30``: short even for a year of days."""
    out: list[str] = []
    for _, run in itertools.groupby(
        enumerate(sorted(days)), key=lambda x: x[1].toordinal() - x[0]
    ):
        items = [d for _, d in run]
        out.append(str(items[0]) if len(items) == 1 else f"{items[0]}..{items[-1]}")
    return " ".join(out)
