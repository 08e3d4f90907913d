"""Finance exports: the allocated bill per day or month, streamed.

One row per period, account, currency and target (a deployment or a team,
``__idle__`` per pool, ``__unallocated__``), so the ``bill_amount`` column of an
account-month sums exactly to the stored bill of that basis. Days without a
bill for the account are *provisional*: their rate-card cost goes in
``provisional_cost`` and the bill column stays empty (a provisional figure is
never added to a bill total). A day with any estimated line is *estimated*.

Rows come from a generator: the window is read one month at a time
(costapp/costs/export/reads.py), so memory does not grow with the window
(tests/costs/test_exports.py measures 1 against 12 months). Each day's rows
come by the day's rules (costapp/costs/export/day_rows.py) from the stored
allocation (``CostShare``, ``CostUsageDay``: costapp/costs/shares.py), or,
by deployment on PostgreSQL, are read as stored with it (``CostExportRow``).
A day whose stored shares are missing or stale is allocated from its bill
lines on the fly, the same way (tests/costs/test_shares.py compares the
three).
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
from typing import Any, Literal

from django.db import connection

from costapp.costs.allocations import _day_ranges, allocations_compute, stored_days_read
from costapp.costs.export.day_rows import DayRows
from costapp.costs.export.reads import (
    ByDay,
    Coverage,
    ShareRow,
    UsageRow,
    coverage_read,
    export_digest_days_read,
    stored_export_rows_read,
    stored_shares_read,
    stored_totals_read,
    stored_usage_read,
)
from costapp.costs.export.rows import (
    QUANTUM,
    ROW_ORDER,
    SCHEMA_FIELDS,
    ExportRow,
    money_as_text,
    row_values,
    stored_values,
)
from costapp.costs.selectors import (
    Basis,
    allocation_rules_read,
    token_days_read,
    usage_days_read,
)

Grain = Literal["day", "month"]
By = Literal["deployment", "team"]
Format = Literal["csv", "parquet"]
ROW_GROUP = 5000

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
        self._builder = DayRows(by_team=spec.by == "team")

    def records(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts keyed by ``SCHEMA_FIELDS`` names."""
        names = [c for c, _ in SCHEMA_FIELDS]
        for values in self.rows():
            yield dict(zip(names, values, strict=True))

    def rows(self, *, money_text: bool = False) -> Iterator[tuple[Any, ...]]:
        """The rows as tuples in ``SCHEMA_FIELDS`` order (what the writers use).

        With ``money_text`` the money cells come as the CSV writes them
        (``rows.money_text``): a stored day's are read so from the
        database, sparing a ``Decimal`` made and formatted per cell."""
        spec = self.spec
        stored = stored_days_read(spec.start, spec.end)
        # Days whose rows by deployment are stored whole under today's fleet
        # and rate card: read, not rebuilt (PostgreSQL only: day_rows).
        whole: set[date] = set()
        if spec.by == "deployment" and connection.vendor == "postgresql":
            whole = export_digest_days_read(stored, self._builder.digest())
        for account_currency, total in stored_totals_read(
            spec.start, spec.end, spec.basis
        ).items():
            self.totals.stored[account_currency] += total
        for a, b in _months(spec.start, spec.end):
            days = self._days(
                a, b, stored, whole, text=money_text and spec.grain == "day"
            )
            if spec.grain == "month":
                rows: dict[tuple[Any, ...], ExportRow] = {}
                for built, read in days:
                    for r in itertools.chain(built, map(ExportRow.from_stored, read)):
                        key = (r.account, r.currency, r.target, r.pool)
                        into = rows.get(key)
                        if into is None:
                            r.period = a
                            rows[key] = r
                        else:
                            into.merge(r)
                yield from self._emit(rows.values(), (b - a).days, money_text)
            else:
                for built, read in days:
                    yield from self._emit(built, 1, money_text)
                    yield from self._emit_stored(read, money_text)

    def _emit(
        self, rows: Iterable[ExportRow], period_days: int, money_text: bool
    ) -> Iterator[tuple[Any, ...]]:
        totals, basis = self.totals, self.spec.basis
        for row in sorted(rows, key=ROW_ORDER):
            key = (row.account, row.currency)
            totals.rows[key] += 1
            if row.bill is not None:
                totals.exported[key] += row.bill
            if row.provisional is not None:
                totals.provisional[key] += row.provisional
            values = row_values(row, basis, period_days)
            yield money_as_text(values) if money_text else values

    def _emit_stored(
        self, read: list[tuple[Any, ...]], text: bool
    ) -> Iterator[tuple[Any, ...]]:
        """A day's stored rows (``STORED_COLUMNS``, in export order) as rows;
        with ``text`` their money was read as text (empty when missing)."""
        totals, basis = self.totals, self.spec.basis
        for stored in read:
            key = (stored[1], stored[2])
            totals.rows[key] += 1
            bill, provisional = stored[7], stored[8]
            if text:
                bill = Decimal(bill) if bill else None
                provisional = Decimal(provisional) if provisional else None
            if bill is not None:
                totals.exported[key] += bill
            if provisional is not None:
                totals.provisional[key] += provisional
            yield stored_values(stored, basis)

    def _days(
        self, a: date, b: date, stored: set[date], whole: set[date], *, text: bool
    ) -> Iterator[tuple[list[ExportRow], list[tuple[Any, ...]]]]:
        """Each day of [a, b), one day at a time: rows built from the stored
        shares and usage, or allocated on the fly into the same shapes
        (``ShareRow``, ``UsageRow``), or the day's stored rows read whole.
        Each source is read for the month only where a day of it needs it."""
        month = {a + timedelta(days=i) for i in range((b - a).days)}
        live = month - stored
        from_shares = (month & stored) - whole
        live_shares: dict[date, list[ShareRow]] = defaultdict(list)
        live_usage: dict[date, list[UsageRow]] = defaultdict(list)
        if live:
            rules = allocation_rules_read()
            for x, y in _day_ranges(live):
                usage = usage_days_read(x, y)
                tokens = token_days_read(x, y)
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
        none = ByDay(iter(()))
        stored_shares, stored_usage = (
            (
                ByDay(stored_shares_read(a, b, self.spec.basis)),
                ByDay(stored_usage_read(a, b)),
            )
            if from_shares
            else (none, none)
        )
        read = (
            ByDay(iter(stored_export_rows_read(a, b, self.spec.basis, money_text=text)))
            if month & whole
            else none
        )
        estimated = self.coverage.estimated
        day = a
        while day < b:
            if day in live:
                built = self._builder.day(
                    day, live_shares.get(day, []), live_usage.get(day, []), estimated
                )
                yield built, []
            elif day in whole:
                yield [], read.take(day)
            else:
                built = self._builder.day(
                    day, stored_shares.take(day), stored_usage.take(day), estimated
                )
                yield built, []
            day += timedelta(days=1)

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
