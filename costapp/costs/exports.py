"""Finance exports: the allocated bill per day or month, streamed.

One row per period, account, currency and target (a deployment or a team,
``__idle__`` per pool, ``__unallocated__``), so the ``bill_amount`` column of an
account-month sums exactly to the stored bill of that basis. Days without a
bill for the account are *provisional*: their rate-card cost goes in
``provisional_cost`` and the bill column stays empty (a provisional figure is
never added to a bill total). A day with any estimated line is *estimated*.

Rows come from a generator: the window is read one month at a time, the
stored allocation (``CostShare``, ``CostUsageDay``: costapp/costs/shares.py)
over ``QuerySet.iterator()``, so memory does not grow with the window
(tests/costs/test_exports.py measures 1 against 12 months). A day whose stored
shares are missing or stale is allocated from its bill lines on the fly, the
same way (tests/costs/test_shares.py compares the two).
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
from django.db import connection
from django.db.models.functions import TruncDate

from analytics.allocation import IDLE, UNALLOCATED
from costapp.costs.rates import rate_book
from costapp.costs.selectors import (
    NOMINAL_LABEL,
    Basis,
    UsageDay,
    _day_ranges,
    allocation_rules,
    allocations_compute,
    stored_days,
    token_days,
    usage_days,
    utc_day_start,
)
from costapp.models import CostLine, CostShare, CostUsageDay, Deployment

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


class _Row:
    """One export row being built (a plain slotted class: a year makes tens
    of thousands, and a dataclass's default factories cost more than the
    row's own arithmetic)."""

    __slots__ = (
        "account",
        "bill",
        "currency",
        "days",
        "generation",
        "gpu_hours",
        "hows",
        "nominal",
        "period",
        "pool",
        "prompt",
        "provisional",
        "requests",
        "target",
    )  # fmt: skip

    def __init__(
        self, period: date, account: str, currency: str, target: str, pool: str
    ) -> None:
        self.period = period
        self.account = account
        self.currency = currency
        self.target = target
        self.pool = pool
        self.hows: set[str] = set()
        self.bill: Decimal | None = None
        self.provisional: Decimal | None = None
        self.days: dict[str, set[date]] = {
            FINAL: set(),
            ESTIMATED: set(),
            PROVISIONAL: set(),
        }
        self.requests: float | None = None
        self.prompt: float | None = None
        self.generation: float | None = None
        self.gpu_hours: float | None = None
        self.nominal = 0

    def add_bill(self, amount: Decimal) -> None:
        self.bill = amount if self.bill is None else self.bill + amount

    def add_provisional(self, amount: Decimal) -> None:
        self.provisional = (
            amount if self.provisional is None else self.provisional + amount
        )

    def add_traffic(self, usage: UsageDay | None, tokens: tuple[float, float]) -> None:
        if usage is not None:
            requests, gpu_hours = float(usage.requests), float(usage.gpu_hours)
            self.requests = (
                requests if self.requests is None else self.requests + requests
            )
            self.gpu_hours = (
                gpu_hours if self.gpu_hours is None else self.gpu_hours + gpu_hours
            )
            self.nominal += usage.nominal_hours
        prompt, generation = tokens
        self.prompt = prompt if self.prompt is None else self.prompt + prompt
        self.generation = (
            generation if self.generation is None else self.generation + generation
        )


def _q(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(QUANTUM)


def _values(row: _Row, basis: str, period_days: int) -> tuple[Any, ...]:
    """The row in ``SCHEMA_FIELDS`` order; unit costs are the cost over the
    traffic at 12 places (inlined: this runs once per row of a year)."""
    bill, provisional = row.bill, row.provisional
    cost = bill
    if provisional is not None:
        cost = provisional if cost is None else cost + provisional
    requests, gpu_hours = row.requests, row.gpu_hours
    prompt, generation = row.prompt, row.generation
    tokens = None if prompt is None or generation is None else prompt + generation
    # Never divide by zero requests: no traffic is no unit cost, not infinity.
    per_1k = per_1m = per_gpu_hour = None
    if cost is not None:
        if requests:
            per_1k = (cost * 1000 / Decimal(repr(requests))).quantize(QUANTUM)
        if tokens:
            per_1m = (cost * 1_000_000 / Decimal(repr(tokens))).quantize(QUANTUM)
        if gpu_hours:
            per_gpu_hour = (cost / Decimal(repr(gpu_hours))).quantize(QUANTUM)
    days = row.days
    estimated, prov = days[ESTIMATED], days[PROVISIONAL]
    return (
        row.period,
        period_days,
        row.account,
        row.currency,
        basis,
        row.target,
        row.pool,
        "; ".join(sorted(row.hows)),
        PROVISIONAL if prov else ESTIMATED if estimated else FINAL,
        len(days[FINAL]),
        len(estimated),
        len(prov),
        None if bill is None else bill.quantize(QUANTUM),
        None if provisional is None else provisional.quantize(QUANTUM),
        requests,
        prompt,
        generation,
        gpu_hours,
        row.nominal,
        per_1k,
        per_1m,
        per_gpu_hour,
    )


def _months(start: date, end: date) -> Iterator[tuple[date, date]]:
    a = start
    while a < end:
        nxt = (a.replace(day=1) + timedelta(days=32)).replace(day=1)
        b = min(nxt, end)
        yield a, b
        a = b


class _ByDay:
    """A day-ordered iterator of rows (day first) handed out one day at a time."""

    def __init__(self, rows: Iterator[tuple[Any, ...]]) -> None:
        self._rows = rows
        self._next = next(rows, None)

    def take(self, day: date) -> list[tuple[Any, ...]]:
        """The rows of ``day``; rows of earlier days are skipped."""
        out = []
        while self._next is not None and self._next[0] <= day:
            if self._next[0] == day:
                out.append(self._next)
            self._next = next(self._rows, None)
        return out


def _stored_usage(a: date, b: date) -> Iterator[tuple[Any, ...]]:
    return (
        CostUsageDay.objects.filter(day__gte=a, day__lt=b)
        .order_by("day", "deployment")
        .values_list(
            "day", "deployment", "gpu_hours", "requests", "nominal_hours",
            "prompt_tokens", "generation_tokens",
        )
        .iterator(chunk_size=10000)
    )  # fmt: skip


# A share as the export reads it: (day, account, currency, target, pool, how,
# amount), a day's sorted by account and currency, then allocation order.
ShareRow = tuple[date, str, str, str, str, str, Decimal]


def _stored_shares(a: date, b: date, basis: Basis) -> Iterator[tuple[Any, ...]]:
    """Stored shares of [a, b) in one basis, by day, account, currency and the
    order the allocation produced them (ids are written in that order)."""
    return (
        CostShare.objects.filter(basis=basis, day__gte=a, day__lt=b)
        .order_by("day", "account_id", "currency", "id")
        .values_list("day", "account_id", "currency", "target", "pool", "how", "amount")
        .iterator(chunk_size=10000)
    )


_BASIS_SQL = {
    "amortized": "amortized_cost",
    "unblended": "unblended_cost",
    "net_amortized": "COALESCE(net_amortized_cost, amortized_cost)",
}


def _stored_totals(a: date, b: date, basis: Basis) -> dict[tuple[str, str], Decimal]:
    """The bill of [a, b) per (account, currency) summed by PostgreSQL from the
    lines themselves (hourly lines of a day that has daily ones left out, as
    ``selectors._lines``): what the summary reconciles the exported shares to."""
    if connection.vendor != "postgresql":
        return _stored_totals_orm(a, b, basis)
    table = CostLine._meta.db_table
    sql = f"""
        SELECT c.account_id, c.currency, SUM({_BASIS_SQL[basis]})
        FROM {table} c
        WHERE c.period_start >= %s AND c.period_start < %s
          AND (c.granularity = 'day' OR NOT EXISTS (
            SELECT 1 FROM {table} d
            WHERE d.granularity = 'day' AND d.account_id = c.account_id
              AND d.period_start >= date_trunc('day', c.period_start AT TIME ZONE 'UTC')
                  AT TIME ZONE 'UTC'
              AND d.period_start < (date_trunc('day', c.period_start AT TIME ZONE 'UTC')
                  + interval '1 day') AT TIME ZONE 'UTC'))
        GROUP BY c.account_id, c.currency
    """  # noqa: S608 (table and column names are constants)
    with connection.cursor() as cursor:
        cursor.execute(sql, [utc_day_start(a), utc_day_start(b)])
        return {(acc, cur): total or Decimal(0) for acc, cur, total in cursor}


def _stored_totals_orm(
    a: date, b: date, basis: Basis
) -> dict[tuple[str, str], Decimal]:
    from costapp.costs.selectors import _lines, line_amount

    out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for line in _lines(a, b):
        out[(line.account_id, line.currency)] += line_amount(line, basis)
    return dict(out)


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
        self._book = rate_book()
        self._targets: dict[str, str] = {}
        # name -> (home account, pool name): read once, not per row.
        self._homes = {
            d.name: (d.account_id, d.pool.name if d.pool else "")
            for d in self._fleet.values()
        }

    def _target(self, name: str) -> str:
        if self.spec.by != "team" or name in (IDLE, UNALLOCATED):
            return name
        team = self._targets.get(name)
        if team is None:
            dep = self._fleet.get(name)
            team = self._targets[name] = (
                dep.team if dep is not None else ""
            ) or NO_TEAM
        return team

    def records(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts keyed by ``SCHEMA_FIELDS`` names."""
        names = [c for c, _ in SCHEMA_FIELDS]
        for values in self.rows():
            yield dict(zip(names, values, strict=True))

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The rows as tuples in ``SCHEMA_FIELDS`` order (what the writers use)."""
        spec = self.spec
        stored = stored_days(spec.start, spec.end)
        for account_currency, total in _stored_totals(
            spec.start, spec.end, spec.basis
        ).items():
            self.totals.stored[account_currency] += total
        # One server-side cursor each over the window, read a day at a time.
        shares = _ByDay(_stored_shares(spec.start, spec.end, spec.basis))
        usage = _ByDay(_stored_usage(spec.start, spec.end))
        for a, b in _months(spec.start, spec.end):
            days = self._days(a, b, stored, shares, usage)
            if spec.grain == "month":
                rows: dict[tuple[Any, ...], _Row] = {}
                for day_rows in days:
                    for r in day_rows:
                        key = (r.account, r.currency, r.target, r.pool)
                        self._merge(rows, key, r, a)
                yield from self._emit(rows.values(), (b - a).days)
            else:
                for day_rows in days:
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

    def _emit(
        self, rows: Iterable[_Row], period_days: int
    ) -> Iterator[tuple[Any, ...]]:
        totals, basis = self.totals, self.spec.basis
        for row in sorted(
            rows, key=lambda r: (r.account, r.currency, r.target, r.pool)
        ):
            key = (row.account, row.currency)
            totals.rows[key] += 1
            if row.bill is not None:
                totals.exported[key] += row.bill
            if row.provisional is not None:
                totals.provisional[key] += row.provisional
            yield _values(row, basis, period_days)

    def _days(
        self,
        a: date,
        b: date,
        stored: set[date],
        stored_shares: _ByDay,
        stored_usage: _ByDay,
    ) -> Iterator[list[_Row]]:
        """Rows of each day of [a, b), one day at a time: stored days from
        the stored shares and usage, the others allocated on the fly."""
        live = {a + timedelta(days=i) for i in range((b - a).days)} - stored
        usage: dict[tuple[str, date], UsageDay] = {}
        tokens: dict[tuple[str, date], tuple[float, float]] = {}
        live_allocs: dict[date, list[ShareRow]] = defaultdict(list)
        by_day: dict[date, list[str]] = defaultdict(list)
        if live:
            rules = allocation_rules()
            for x, y in _day_ranges(live):
                live_usage = usage_days(x, y)
                usage.update(live_usage)
                tokens.update(token_days(x, y))
                allocs = allocations_compute(
                    x, y, [self.spec.basis], rules=rules, usage=live_usage
                )[self.spec.basis]
                for (account, day, currency), allocation in sorted(allocs.items()):
                    live_allocs[day].extend(
                        (day, account, currency, s.target, s.pool, s.how, s.amount)
                        for s in allocation.shares
                    )
            for name, day in set(usage) | set(tokens):
                by_day[day].append(name)
        day = a
        while day < b:
            day_shares = stored_shares.take(day)
            day_usage = stored_usage.take(day)
            if day in live:
                yield self._day(
                    day, live_allocs.get(day, []), usage, tokens,
                    sorted(by_day.get(day, [])),
                )  # fmt: skip
            else:
                for _, name, gpu_h, req, nominal, p, g in day_usage:
                    usage[(name, day)] = UsageDay(gpu_h, req, nominal)
                    tokens[(name, day)] = (p, g)
                yield self._day(
                    day, day_shares, usage, tokens, [r[1] for r in day_usage]
                )
            day += timedelta(days=1)

    def _day(
        self,
        day: date,
        shares: list[ShareRow],
        usage: dict[tuple[str, date], UsageDay],
        tokens: dict[tuple[str, date], tuple[float, float]],
        active: list[str],
    ) -> list[_Row]:
        """The rows of one day from its shares, sorted by account and
        currency (each in the order the allocation produced them)."""
        book = self._book
        rows: dict[tuple[str, str, str, str], _Row] = {}
        # Which row carries each deployment's traffic (exactly one per day).
        traffic_row: dict[str, _Row] = {}
        fleet, homes = self._fleet, self._homes
        target_of = self._target if self.spec.by == "team" else None
        # Each billed account's first currency (in sorted order).
        currencies: dict[str, str] = {}
        status = FINAL
        for _, account, currency, name, pool, how, amount in shares:
            if account not in currencies:
                currencies[account] = currency
                status = (
                    ESTIMATED
                    if day in self.coverage.estimated.get(account, ())
                    else FINAL
                )
            target = name if target_of is None else target_of(name)
            key = (account, currency, target, pool)
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Row(day, account, currency, target, pool)
                row.days[status].add(day)
            row.hows.add(how)
            row.bill = amount if row.bill is None else row.bill + amount
            if name != IDLE and name != UNALLOCATED:
                if name not in traffic_row:
                    traffic_row[name] = row
                else:
                    known = homes.get(name)
                    if known is not None and account == known[0]:
                        traffic_row[name] = row
        billed_accounts = sorted(currencies)
        for name in active:
            dep = fleet.get(name)
            if dep is None:
                continue
            use = usage.get((name, day))
            home, pool_name = homes[name]
            billed = home in billed_accounts if home else bool(billed_accounts)
            row = traffic_row.get(name)
            if billed and row is None:
                # The day is billed and none of it is this deployment's: $0.
                account = home or billed_accounts[0]
                currency = currencies[account]
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
