"""Finance exports: the allocated bill per day or month, streamed.

One row per period, account, currency and target (a deployment or a team,
``__idle__`` per pool, ``__unallocated__``), so the ``bill_amount`` column of an
account-month sums exactly to the stored bill of that basis. Days without a
bill for the account are *provisional*: their rate-card cost goes in
``provisional_cost`` and the bill column stays empty (a provisional figure is
never added to a bill total). A day with any estimated line is *estimated*.

Rows come from a generator: the window is read one month at a time, the
stored allocation (``CostShare``, ``CostUsageDay``: costapp/costs/shares.py)
over ``QuerySet.iterator()`` (costapp/costs/export_reads.py), so memory does not grow with the window
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
from datetime import date, timedelta
from decimal import Decimal
from operator import attrgetter
from typing import Any, Literal

from analytics.allocation import IDLE, UNALLOCATED
from costapp.costs.allocations import _day_ranges, allocations_compute, stored_days
from costapp.costs.export_reads import (
    ByDay,
    Coverage,
    ShareRow,
    UsageRow,
    coverage_read,
    stored_shares_read,
    stored_totals_read,
    stored_usage_read,
)
from costapp.costs.export_rows import (
    ESTIMATED,
    FINAL,
    PROVISIONAL,
    QUANTUM,
    SCHEMA_FIELDS,
    ExportRow,
    row_values,
)
from costapp.costs.rates import rate_book
from costapp.costs.selectors import (
    NOMINAL_LABEL,
    Basis,
    allocation_rules,
    token_days,
    usage_days,
)
from costapp.models import Deployment

Grain = Literal["day", "month"]
By = Literal["deployment", "team"]
Format = Literal["csv", "parquet"]
NO_TEAM = "__no_team__"
# A billed day with the deployment's traffic but none of the bill: $0.
NO_SHARE = "no share"
ROW_GROUP = 5000
# Rows within a period: by account, currency, target, pool.
_ROW_ORDER = attrgetter("account", "currency", "target", "pool")

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


def file_stem(spec: ExportSpec, coverage: Coverage) -> str:
    stem = (
        f"costapp-{spec.start}-to-{spec.last_day}-{spec.grain}-{spec.by}-{spec.basis}"
    )
    return stem if coverage.complete else stem + "-incomplete"


def _q(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(QUANTUM)


def _months(start: date, end: date) -> Iterator[tuple[date, date]]:
    a = start
    while a < end:
        nxt = (a.replace(day=1) + timedelta(days=32)).replace(day=1)
        b = min(nxt, end)
        yield a, b
        a = b


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
        for account_currency, total in stored_totals_read(
            spec.start, spec.end, spec.basis
        ).items():
            self.totals.stored[account_currency] += total
        # One server-side cursor each over the window, read a day at a time.
        shares = ByDay(stored_shares_read(spec.start, spec.end, spec.basis))
        usage = ByDay(stored_usage_read(spec.start, spec.end))
        for a, b in _months(spec.start, spec.end):
            days = self._days(a, b, stored, shares, usage)
            if spec.grain == "month":
                rows: dict[tuple[Any, ...], ExportRow] = {}
                for day_rows in days:
                    for r in day_rows:
                        key = (r.account, r.currency, r.target, r.pool)
                        into = rows.get(key)
                        if into is None:
                            r.period = a
                            rows[key] = r
                        else:
                            into.merge(r)
                yield from self._emit(rows.values(), (b - a).days)
            else:
                for day_rows in days:
                    yield from self._emit(day_rows, 1)

    def _emit(
        self, rows: Iterable[ExportRow], period_days: int
    ) -> Iterator[tuple[Any, ...]]:
        totals, basis = self.totals, self.spec.basis
        for row in sorted(rows, key=_ROW_ORDER):
            key = (row.account, row.currency)
            totals.rows[key] += 1
            if row.bill is not None:
                totals.exported[key] += row.bill
            if row.provisional is not None:
                totals.provisional[key] += row.provisional
            yield row_values(row, basis, period_days)

    def _days(
        self,
        a: date,
        b: date,
        stored: set[date],
        stored_shares: ByDay,
        stored_usage: ByDay,
    ) -> Iterator[list[ExportRow]]:
        """Rows of each day of [a, b), one day at a time: stored days from
        the stored shares and usage, the others allocated on the fly into
        the same shapes (``ShareRow``, ``UsageRow``)."""
        live = {a + timedelta(days=i) for i in range((b - a).days)} - stored
        live_shares: dict[date, list[ShareRow]] = defaultdict(list)
        live_usage: dict[date, list[UsageRow]] = defaultdict(list)
        if live:
            rules = allocation_rules()
            for x, y in _day_ranges(live):
                usage = usage_days(x, y)
                tokens = token_days(x, y)
                allocs = allocations_compute(
                    x, y, [self.spec.basis], rules=rules, usage=usage
                )[self.spec.basis]
                for (account, day, currency), allocation in sorted(allocs.items()):
                    live_shares[day].extend(
                        (day, account, currency, s.target, s.pool, s.how, s.amount)
                        for s in allocation.shares
                    )
                # Each day's deployments by name: a team row's traffic sums in it.
                for day, name in sorted((d, n) for n, d in set(usage) | set(tokens)):
                    use = usage.get((name, day))
                    prompt, generation = tokens.get((name, day), (0.0, 0.0))
                    live_usage[day].append(
                        (day, name, None, None, 0, prompt, generation)
                        if use is None
                        else (
                            day, name, use.gpu_hours, use.requests,
                            use.nominal_hours, prompt, generation,
                        )
                    )  # fmt: skip
        day = a
        while day < b:
            day_shares = stored_shares.take(day)
            day_usage = stored_usage.take(day)
            if day in live:
                yield self._day(day, live_shares.get(day, []), live_usage.get(day, []))
            else:
                yield self._day(day, day_shares, day_usage)
            day += timedelta(days=1)

    def _day(
        self,
        day: date,
        shares: list[ShareRow],
        traffic: list[UsageRow],
    ) -> list[ExportRow]:
        """The rows of one day from its shares, sorted by account and
        currency (each in the order the allocation produced them)."""
        book = self._book
        rows: dict[tuple[str, str, str, str], ExportRow] = {}
        # Which row carries each deployment's traffic (exactly one per day).
        traffic_row: dict[str, ExportRow] = {}
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
                row = rows[key] = ExportRow(
                    day, account, currency, target, pool, status
                )
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
        for _, name, gpu_hours, requests, nominal, prompt, generation in traffic:
            dep = fleet.get(name)
            if dep is None:
                continue
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
                    status = (
                        ESTIMATED
                        if day in self.coverage.estimated.get(account, set())
                        else FINAL
                    )
                    row = rows[key] = ExportRow(day, *key, status)
                    row.add_bill(Decimal(0))
                    row.hows.add(NO_SHARE)
            elif not billed:
                rate = book.for_deployment(dep, day)
                currency = rate[1] if rate is not None else "USD"
                key = (home, currency, self._target(name), pool_name)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = ExportRow(day, *key, PROVISIONAL)
                row.hows.add("rate card")
                if rate is not None and gpu_hours is not None:
                    row.add_provisional((gpu_hours * rate[0]).quantize(QUANTUM))
            assert row is not None
            if nominal:
                row.hows.add(NOMINAL_LABEL.format(n=nominal))
            row.add_traffic(gpu_hours, requests, nominal, prompt, generation)
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
