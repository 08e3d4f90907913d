"""Writes of the stored allocation: ``CostShare`` and ``CostUsageDay`` per UTC
day, and on PostgreSQL the day's finance export rows by deployment built from
them (``CostExportRow``, ``export_rows_store``).

``allocation_days_read`` (costs/allocations.py) reads these instead of allocating
every bill line on every request. A day is the unit: one transaction per day
replaces its shares (every account, currency and basis) and its deployments'
usage whole, then stamps ``CostShareDay`` with the time taken *before* the
inputs were read and the digest of the rules. A later write to the day's bill
lines or hours deletes the stamp (database triggers), and a run that finished
after it or a rule change makes it stale too: the day is read on the fly
until it is recomputed.

Who recomputes: ``economics.unit_costs.services.unit_costs_recompute`` calls
``cost_shares_rebuild`` for the stale days first, before it reads the
allocation; it runs after every Cost Explorer, FOCUS, demo or telemetry run
(``unit_costs_recompute_task``), nightly in full, and in the ``demo`` and
``unit_costs_recompute`` commands. The ``fleet_load`` command does the same
after a load (changed rules, pools or members change the digest; a changed
home account or rate card changes the export rows' digest, and those days are
stale to it too).
``manage.py costs_allocate`` rebuilds a window explicitly. A day never stored
(data from before migration 0012) or stale is allocated on the fly until one
of those stores it: slower to read, never wrong.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from typing import get_args

from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from costapp.costs.allocations import (
    _day_ranges,
    allocation_digest,
    allocations_compute,
    stored_days_read,
)
from costapp.costs.export.day_rows import DayRows
from costapp.costs.export.reads import (
    coverage_read,
    export_digest_days_read,
    stored_shares_read,
    stored_usage_read,
)
from costapp.costs.export.rows import ROW_ORDER, STORED_COLUMNS, row_values, stored_of
from costapp.costs.selectors import (
    BASES,
    Basis,
    allocation_rules_read,
    nominal_gpu_seconds_read,
    token_days_read,
    usage_days_read,
)
from costapp.models import (
    CostExportDay,
    CostExportRow,
    CostLine,
    CostShare,
    CostShareDay,
    CostUsageDay,
    DeploymentHour,
)
from costapp.pgcopy import rows_insert

logger = logging.getLogger(__name__)

ALL_BASES: tuple[Basis, ...] = tuple(BASES)  # type: ignore[arg-type]
# Days computed per read of the inputs: a month of lines and hours at a time
# keeps memory flat over a year.
CHUNK_DAYS = 31

assert set(ALL_BASES) == set(get_args(Basis))


@dataclass(frozen=True)
class SharesResult:
    days: int
    shares: int
    usage_rows: int


def _chunks(days: Collection[date]) -> Iterator[tuple[date, date, set[date]]]:
    for a, b in _day_ranges(days):
        while a < b:
            c = min(b, a + timedelta(days=CHUNK_DAYS))
            yield a, c, {a + timedelta(days=i) for i in range((c - a).days)}
            a = c


def cost_shares_compute(*, days: Collection[date]) -> SharesResult:
    """Recompute and store the shares and usage of ``days``, one transaction
    per day, each replacing that day's rows whole."""
    n_days = n_shares = n_usage = 0
    for a, b, chunk in _chunks(days):
        computed_at = timezone.now()  # before reading: a later run makes it stale
        rules = allocation_rules_read()
        digest = allocation_digest(rules, nominal_gpu_seconds_read())
        usage = usage_days_read(a, b)
        tokens = token_days_read(a, b)
        allocations = allocations_compute(a, b, ALL_BASES, rules=rules, usage=usage)
        per_day: dict[date, list[CostShare]] = defaultdict(list)
        for basis, by_key in allocations.items():
            for (account, day, currency), allocation in by_key.items():
                per_day[day].extend(
                    CostShare(
                        day=day,
                        account_id=account,
                        currency=currency,
                        basis=basis,
                        line_id=int(s.line_key),
                        target=s.target,
                        pool=s.pool,
                        how=s.how,
                        amount=s.amount,
                    )
                    for s in allocation.shares
                )
        usage_per_day: dict[date, list[CostUsageDay]] = defaultdict(list)
        for (name, day), u in usage.items():
            p, g = tokens.get((name, day), (0.0, 0.0))
            usage_per_day[day].append(
                CostUsageDay(
                    day=day,
                    deployment=name,
                    gpu_hours=u.gpu_hours,
                    requests=u.requests,
                    nominal_hours=u.nominal_hours,
                    prompt_tokens=p,
                    generation_tokens=g,
                )
            )
        # The export's rows are stored on PostgreSQL only: on SQLite money
        # keeps 15 digits, and a row read back would not be the row built.
        builder = DayRows() if connection.vendor == "postgresql" else None
        estimated = coverage_read(a, b).estimated if builder else {}
        export_digest = builder.digest() if builder else ""
        for day in sorted(chunk):
            with transaction.atomic():
                CostShare.objects.filter(day=day).delete()
                CostUsageDay.objects.filter(day=day).delete()
                CostExportRow.objects.filter(day=day).delete()
                CostExportDay.objects.filter(day=day).delete()
                rows_insert(CostShare, per_day.get(day, []), batch_size=5000)
                rows_insert(CostUsageDay, usage_per_day.get(day, []), batch_size=5000)
                if builder is not None:
                    export_rows_store(builder, day, estimated)
                    CostExportDay.objects.create(day=day, digest=export_digest)
                CostShareDay.objects.update_or_create(
                    day=day,
                    defaults={"computed_at": computed_at, "rules_digest": digest},
                )
            n_days += 1
            n_shares += len(per_day.get(day, []))
            n_usage += len(usage_per_day.get(day, []))
    logger.info(
        "cost shares stored: %d days, %d shares, %d usage rows",
        n_days,
        n_shares,
        n_usage,
    )
    return SharesResult(n_days, n_shares, n_usage)


def export_rows_store(
    builder: DayRows, day: date, estimated: Mapping[str, Collection[date]]
) -> None:
    """The export's rows of ``day`` by deployment in each basis, built by the
    export's own rules from the shares and usage just written, read back as
    the export reads them (amounts and GPU-hours as the database rounded
    them), and stored in export order."""
    end = day + timedelta(days=1)
    usage = list(stored_usage_read(day, end))
    rows: list[CostExportRow] = []
    for basis in ALL_BASES:
        shares = list(stored_shares_read(day, end, basis))
        built = builder.day(day, shares, usage, estimated)
        rows.extend(
            CostExportRow(
                basis=basis,
                position=i,
                **dict(
                    zip(STORED_COLUMNS, stored_of(row_values(r, basis, 1)), strict=True)
                ),
            )
            for i, r in enumerate(sorted(built, key=ROW_ORDER))
        )
    rows_insert(CostExportRow, rows, batch_size=5000)


def data_span() -> tuple[date, date] | None:
    """First and day-after-last UTC day holding a bill line or telemetry."""
    lines = CostLine.objects.aggregate(a=Min("period_start"), b=Max("period_start"))
    hours = DeploymentHour.objects.aggregate(a=Min("hour"), b=Max("hour"))
    firsts = [v for v in (lines["a"], hours["a"]) if v is not None]
    lasts = [v for v in (lines["b"], hours["b"]) if v is not None]
    if not firsts:
        return None
    return (
        min(firsts).astimezone(UTC).date(),
        max(lasts).astimezone(UTC).date() + timedelta(days=1),
    )


def cost_shares_rebuild(
    *, start: date | None = None, end: date | None = None, stale_only: bool = True
) -> SharesResult:
    """(Re)store ``start``..``end`` (default: every day with data); with
    ``stale_only`` only the days ``stored_days_read`` does not vouch for."""
    span = data_span()
    if span is None:
        return SharesResult(0, 0, 0)
    start = start or span[0]
    end = end or span[1]
    if start >= end:
        return SharesResult(0, 0, 0)
    days = {start + timedelta(days=i) for i in range((end - start).days)}
    if stale_only:
        fresh = stored_days_read(start, end)
        if connection.vendor == "postgresql":
            # A day whose export rows were built under another fleet or rate
            # card is stale too (the export rebuilds it from its shares).
            fresh = export_digest_days_read(fresh, DayRows().digest())
        days -= fresh
    return cost_shares_compute(days=days)
