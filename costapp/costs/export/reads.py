"""What the finance export reads from the database: which account-days have
a bill, and the stored allocation (``CostShare``, ``CostUsageDay``) and bill
totals of a window, each over one server-side cursor read a day at a time
(``ByDay``), so memory does not grow with the window; and the one read-only
snapshot an export reads in, from the command and the web alike.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncDate

from costapp.costs.export.rows import STORED_COLUMNS
from costapp.costs.selectors import Basis, cost_lines_read, line_amount
from costapp.days import utc_midnight
from costapp.models import (
    CostExportDay,
    CostExportRow,
    CostLine,
    CostShare,
    CostUsageDay,
)

T = TypeVar("T")


@contextmanager
def one_snapshot() -> Iterator[None]:
    """The rows, the totals and the summary read in one read-only snapshot:
    a bill or an ingest that commits mid-export changes none of them, so the
    summary always reconciles with the file beside it. Inside a transaction
    the server-side cursors are plain ones, not WITH HOLD cursors that
    PostgreSQL materialises whole before the first row."""
    nested = connection.in_atomic_block
    if connection.vendor == "sqlite" and not nested:
        with _sqlite_snapshot():
            yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql" and not nested:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
                )
        yield


@contextmanager
def _sqlite_snapshot() -> Iterator[None]:
    """A DEFERRED transaction, read-only: in WAL mode (``env.database_from_url``)
    it reads one snapshot from its first read while writers go on committing.
    The ``IMMEDIATE`` that writes begin with would take the write lock for as
    long as the download lasts, and every login and page (each saves its
    session) would wait behind it and fail with "database is locked".
    ``query_only`` refuses a write inside it, which would take that lock too."""
    wrapper: Any = connection  # transaction_mode: the SQLite wrapper's own
    wrapper.ensure_connection()  # connecting sets transaction_mode afresh
    mode = wrapper.transaction_mode
    wrapper.transaction_mode = "DEFERRED"
    try:
        with transaction.atomic():
            wrapper.transaction_mode = mode
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA query_only = ON")
            yield
    finally:
        wrapper.transaction_mode = mode
        # After the transaction ends, so that an error in it is not hidden
        # by a query refused inside a broken atomic block.
        if wrapper.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA query_only = OFF")


def in_one_snapshot(body: Callable[[], Iterator[T]]) -> Iterator[T]:
    """``body()`` streamed inside one read-only snapshot, opened at the
    first item and closed when the stream ends or is closed.

    For a streamed response the snapshot opens when the server starts
    sending, after the view and its middleware are done: they may write
    (the session is saved on the way out), which a read-only transaction
    held from the view would refuse. Django closes the stream when the
    response closes, a client that goes away included."""
    with one_snapshot():
        yield from body()


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
        period_start__gte=utc_midnight(start), period_start__lt=utc_midnight(end)
    )
    billed: dict[str, set[date]] = defaultdict(set)
    estimated: dict[str, set[date]] = defaultdict(set)
    # One pass over the lines: each account-day, and whether any is estimated.
    days = (
        lines.annotate(d=TruncDate("period_start", tzinfo=UTC))
        .values("account_id", "d")
        .annotate(n_estimated=Count("pk", filter=Q(estimated=True)))
        .values_list("account_id", "d", "n_estimated")
    )
    for account, day, n_estimated in days.iterator():
        billed[account].add(day)
        if n_estimated:
            estimated[account].add(day)
    span = tuple(start + timedelta(days=i) for i in range((end - start).days))
    return Coverage(span, dict(billed), dict(estimated))


class ByDay:
    """A day-ordered iterator of rows (day first) handed out one day at a time."""

    def __init__(self, rows: Iterator[tuple[Any, ...]]) -> None:
        # groupby splits the days in C: a year is tens of thousands of rows.
        self._days = itertools.groupby(rows, key=itemgetter(0))
        self._day: date | None
        self._rows: Iterator[tuple[Any, ...]]
        self._day, self._rows = next(self._days, _END)

    def take(self, day: date) -> list[tuple[Any, ...]]:
        """The rows of ``day``; rows of earlier days are skipped."""
        while self._day is not None and self._day < day:
            self._day, self._rows = next(self._days, _END)
        if self._day != day:
            return []
        out = list(self._rows)
        self._day, self._rows = next(self._days, _END)
        return out


_END: tuple[None, Iterator[Any]] = (None, iter(()))

# A deployment's day of traffic as the export reads it: (day, deployment,
# GPU-hours, requests, nominal hours, prompt tokens, generation tokens), the
# GPU-hours and requests ``None`` when only tokens are known. Stored days
# read it so from ``CostUsageDay``; days on the fly are built so.
UsageRow = tuple[date, str, Decimal | None, Decimal | None, int, float, float]


def stored_usage_read(a: date, b: date) -> Iterator[UsageRow]:
    """Stored usage of [a, b) by day and deployment, as ``UsageRow``."""
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


def stored_shares_read(a: date, b: date, basis: Basis) -> Iterator[tuple[Any, ...]]:
    """Stored shares of [a, b) in one basis, by day, account, currency and the
    order the allocation produced them (ids are written in that order)."""
    return (
        CostShare.objects.filter(basis=basis, day__gte=a, day__lt=b)
        .order_by("day", "account_id", "currency", "id")
        .values_list("day", "account_id", "currency", "target", "pool", "how", "amount")
        .iterator(chunk_size=10000)
    )


def export_digest_days_read(days: Collection[date], digest: str) -> set[date]:
    """Those of ``days`` (stored days) whose export rows were stored under
    ``digest`` (``day_rows.DayRows.digest``)."""
    if not days:
        return set()
    return set(
        CostExportDay.objects.filter(
            day__gte=min(days), day__lte=max(days), digest=digest
        ).values_list("day", flat=True)
    ) & set(days)


_STORED_MONEY = {
    f.name
    for f in CostExportRow._meta.fields
    if f.get_internal_type() == "DecimalField"
}


def stored_export_rows_read(
    a: date, b: date, basis: Basis, *, money_text: bool = False
) -> list[tuple[Any, ...]]:
    """Stored export rows of [a, b) in one basis (``STORED_COLUMNS``), by day
    in export order; with ``money_text`` the money as PostgreSQL's text of
    it, which is the CSV's (``rows.money_text``), a missing amount
    empty.

    The export asks a month at a time, so the list is one month of the
    fleet's rows: one plain fetch, without the server-side cursor and the
    ORM's row iterator, which cost a fifth more here."""
    columns = [
        f"COALESCE({c}::text, '')" if money_text and c in _STORED_MONEY else c
        for c in STORED_COLUMNS
    ]
    table = CostExportRow._meta.db_table
    sql = (
        f"SELECT {', '.join(columns)} FROM {table} "  # noqa: S608 (constants)
        "WHERE basis = %s AND day >= %s AND day < %s ORDER BY day, position"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [basis, a, b])
        return cursor.fetchall()


_BASIS_SQL = {
    "amortized": "amortized_cost",
    "unblended": "unblended_cost",
    "net_amortized": "COALESCE(net_amortized_cost, amortized_cost)",
}


def stored_totals_read(
    a: date, b: date, basis: Basis
) -> dict[tuple[str, str], Decimal]:
    """The bill of [a, b) per (account, currency) summed by PostgreSQL from the
    lines themselves (hourly lines of a day that has daily ones left out, as
    ``selectors.cost_lines_read``): what the summary reconciles the exported shares to."""
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
        cursor.execute(sql, [utc_midnight(a), utc_midnight(b)])
        return {(acc, cur): total or Decimal(0) for acc, cur, total in cursor}


def _stored_totals_orm(
    a: date, b: date, basis: Basis
) -> dict[tuple[str, str], Decimal]:
    out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for line in cost_lines_read(a, b):
        out[(line.account_id, line.currency)] += line_amount(line, basis)
    return dict(out)
