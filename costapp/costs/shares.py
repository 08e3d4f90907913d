"""Writes of the stored allocation: ``CostShare`` and ``CostUsageDay`` per UTC day.

``allocation_days`` (costs/allocations.py) reads these instead of allocating
every bill line on every request. A day is the unit: one transaction per day
replaces its shares (every account, currency and basis) and its deployments'
usage whole, then stamps ``CostShareDay`` with the time taken *before* the
inputs were read and the digest of the rules. A later write to the day's bill
lines or hours deletes the stamp (database triggers), and a run that finished
after it or a rule change makes it stale too: the day is read on the fly
until it is recomputed.

Who recomputes: ``economics.services.unit_costs_recompute`` calls
``cost_shares_rebuild`` for the stale days first, before it reads the
allocation; it runs after every Cost Explorer, FOCUS, demo or telemetry run
(``unit_costs_recompute_task``), nightly in full, and in the ``demo`` and
``unit_costs_recompute`` commands. The ``fleet_load`` command does the same
after a load (changed rules, pools or members change the digest).
``manage.py costs_allocate`` rebuilds a window explicitly. A day never stored
(data from before migration 0012) or stale is allocated on the fly until one
of those stores it: slower to read, never wrong.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from typing import get_args

from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from costapp.costs.allocations import (
    _day_ranges,
    allocation_digest,
    allocations_compute,
    stored_days,
)
from costapp.costs.selectors import (
    BASES,
    Basis,
    _nominal_gpu_seconds,
    allocation_rules,
    token_days,
    usage_days,
)
from costapp.models import (
    CostLine,
    CostShare,
    CostShareDay,
    CostUsageDay,
    DeploymentHour,
)

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
        rules = allocation_rules()
        digest = allocation_digest(rules, _nominal_gpu_seconds())
        usage = usage_days(a, b)
        tokens = token_days(a, b)
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
        for day in sorted(chunk):
            with transaction.atomic():
                CostShare.objects.filter(day=day).delete()
                CostUsageDay.objects.filter(day=day).delete()
                CostShare.objects.bulk_create(per_day.get(day, []), batch_size=5000)
                CostUsageDay.objects.bulk_create(
                    usage_per_day.get(day, []), batch_size=5000
                )
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
    ``stale_only`` only the days ``stored_days`` does not vouch for."""
    span = data_span()
    if span is None:
        return SharesResult(0, 0, 0)
    start = start or span[0]
    end = end or span[1]
    if start >= end:
        return SharesResult(0, 0, 0)
    days = {start + timedelta(days=i) for i in range((end - start).days)}
    if stale_only:
        days -= stored_days(start, end)
    return cost_shares_compute(days=days)
