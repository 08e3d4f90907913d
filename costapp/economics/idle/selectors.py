"""Reads of the stored idle figures (``IdleFigure``, written by
``idle.services``) that the idle page, the overview's card and the deployment
page's card share: summed over a window per series, per currency, or as one
deployment's card. ``idle.present`` turns them into strings."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Q, QuerySet, Sum

from costapp.economics.idle.flags import UNDERESTIMATES
from costapp.models import Deployment
from costapp.models.economics import IdleFigure


@dataclass(frozen=True)
class IdleRow:
    """One deployment or pool over a window, one currency."""

    scope: str
    name: str
    currency: str
    team: str
    pool: str
    paid_gpu_hours: float | None
    paid_amount: Decimal | None
    paid_days: int
    paid_missing: int
    headroom_gpu_hours: float | None
    headroom_amount: Decimal | None
    headroom_days: int
    headroom_missing: int
    methods: tuple[str, ...]
    underestimated_days: int
    capacity_per_replica: float | None
    notes: tuple[str, ...]


def _window_q(start: date, end: date) -> Q:
    return Q(day__gte=start, day__lt=end)


def idle_series_names_read(deployments: Iterable[str] | None) -> list[str] | None:
    """The idle series a deployment filter keeps: the deployments and the
    pools they run in (a pool member's paid idle is its pool's). ``None``
    (no filter) keeps every series."""
    if deployments is None:
        return None
    names = list(deployments)
    pools = (
        Deployment.objects.filter(name__in=names, pool__isnull=False)
        .values_list("pool__name", flat=True)
        .distinct()
    )
    return [*names, *pools]


SeriesKey = tuple[str, str, str]  # scope, name, currency


@dataclass
class _KindSums:
    gpu_hours: float | None = None
    amount: Decimal | None = None
    days: int = 0
    missing: int = 0


@dataclass
class _SeriesSums:
    paid: _KindSums = field(default_factory=_KindSums)
    headroom: _KindSums = field(default_factory=_KindSums)
    methods: set[str] = field(default_factory=set)
    underestimated_days: int = 0
    capacity_per_replica: float | None = None
    notes: set[str] = field(default_factory=set)


def _sums_read(
    qs: QuerySet[IdleFigure],
) -> tuple[dict[SeriesKey, _SeriesSums], dict[SeriesKey, date]]:
    """Summed by the database, per series, currency and kind (and method,
    which comes with the sums); with the last day that carried a capacity
    per series."""
    known = Q(gpu_hours__isnull=False, amount__isnull=False)
    acc: dict[SeriesKey, _SeriesSums] = {}
    cap_days: dict[SeriesKey, date] = {}
    grouped = (
        qs.values("scope", "name", "currency", "kind", "method")
        .annotate(
            n=Count("pk"),
            missing=Count("pk", filter=~known),
            hours=Sum("gpu_hours", filter=known),
            amount=Sum("amount", filter=known),
            cap_day=Max("day", filter=Q(capacity_per_replica__isnull=False)),
        )
        .order_by()
    )
    for g in grouped:
        key = (g["scope"], g["name"], g["currency"])
        a = acc.setdefault(key, _SeriesSums())
        kind = a.paid if g["kind"] == "paid" else a.headroom
        kind.days += g["n"]
        kind.missing += g["missing"]
        if g["n"] > g["missing"]:
            kind.gpu_hours = (kind.gpu_hours or 0.0) + g["hours"]
            kind.amount = (kind.amount or Decimal(0)) + g["amount"]
        if g["kind"] == "headroom":
            a.methods.add(g["method"])
            if g["cap_day"] is not None and g["cap_day"] > cap_days.get(key, date.min):
                cap_days[key] = g["cap_day"]
    return acc, cap_days


def _headroom_facts_read(
    qs: QuerySet[IdleFigure],
    acc: dict[SeriesKey, _SeriesSums],
    cap_days: dict[SeriesKey, date],
) -> None:
    """The facts that are not sums (flags, notes, the latest capacity) into
    ``acc``, read from the headroom rows that carry them only."""
    headroom = qs.filter(kind="headroom").order_by()
    keys = ("scope", "name", "currency")
    for *key, flags in headroom.exclude(flags=[]).values_list(*keys, "flags"):
        a = acc.setdefault(tuple(key), _SeriesSums())
        a.underestimated_days += int(UNDERESTIMATES in (flags or []))
    notes = headroom.filter(note__startswith="no capacity")
    for *key, note in notes.values_list(*keys, "note").distinct():
        acc.setdefault(tuple(key), _SeriesSums()).notes.add(note)
    if cap_days:
        latest = headroom.filter(
            day__in=set(cap_days.values()), capacity_per_replica__isnull=False
        ).values_list(*keys, "day", "capacity_per_replica")
        for scope, name, cur, day, cap in latest:
            if cap_days.get((scope, name, cur)) == day:
                acc[(scope, name, cur)].capacity_per_replica = cap


def idle_rows_read(
    *, start: date, end: date, scopes: tuple[str, ...] = ("pool", "deployment"),
    names: Iterable[str] | None = None,
) -> list[IdleRow]:  # fmt: skip
    """Both kinds summed over the window's days, per series and currency. A
    sum over days some of which are unknown counts only the known ones and
    says how many are missing; none known is ``None``."""
    qs = IdleFigure.objects.filter(_window_q(start, end), scope__in=scopes)
    if names is not None:
        qs = qs.filter(name__in=list(names))
    meta = {d.name: (d.team, d.pool.name if d.pool else "")
            for d in Deployment.objects.select_related("pool")}  # fmt: skip
    acc, cap_days = _sums_read(qs)
    _headroom_facts_read(qs, acc, cap_days)
    out = []
    for (scope, name, cur), a in sorted(acc.items(), key=lambda item: item[0]):
        team, pool = meta.get(name, ("", "")) if scope == "deployment" else ("", name)
        out.append(
            IdleRow(
                scope=scope, name=name, currency=cur, team=team, pool=pool,
                paid_gpu_hours=a.paid.gpu_hours, paid_amount=a.paid.amount,
                paid_days=a.paid.days, paid_missing=a.paid.missing,
                headroom_gpu_hours=a.headroom.gpu_hours,
                headroom_amount=a.headroom.amount,
                headroom_days=a.headroom.days, headroom_missing=a.headroom.missing,
                methods=tuple(sorted(a.methods)),
                underestimated_days=a.underestimated_days,
                capacity_per_replica=a.capacity_per_replica,
                notes=tuple(sorted(a.notes)),
            )
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class IdleTotal:
    """The fleet's idle over a window in one currency: paid (pools and
    deployments outside pools) and headroom (deployments)."""

    currency: str
    paid_amount: Decimal | None
    paid_gpu_hours: float | None
    headroom_amount: Decimal | None
    headroom_gpu_hours: float | None
    missing_days: int
    methods: tuple[str, ...]
    underestimated_days: int


def idle_totals_read(
    *, start: date, end: date, names: Iterable[str] | None = None
) -> list[IdleTotal]:
    """Totals per currency. Paid idle counts pools and deployments outside
    pools (a pool member has none of its own); headroom counts deployments
    only (pool rows are the sum of theirs)."""
    rows = idle_rows_read(start=start, end=end, names=names)
    by: dict[str, list[IdleRow]] = defaultdict(list)
    for r in rows:
        by[r.currency].append(r)

    def add(values: list[Any]) -> Any:
        known = [v for v in values if v is not None]
        return sum(known[1:], known[0]) if known else None

    out = []
    for cur, rs in sorted(by.items()):
        paid = [r for r in rs if r.scope == "pool" or (r.scope == "deployment"
                                                        and not r.pool)]  # fmt: skip
        head = [r for r in rs if r.scope == "deployment"]
        out.append(
            IdleTotal(
                currency=cur,
                paid_amount=add([r.paid_amount for r in paid]),
                paid_gpu_hours=add([r.paid_gpu_hours for r in paid]),
                headroom_amount=add([r.headroom_amount for r in head]),
                headroom_gpu_hours=add([r.headroom_gpu_hours for r in head]),
                missing_days=sum(r.paid_missing for r in paid)
                + sum(r.headroom_missing for r in head),
                methods=tuple(sorted({m for r in head for m in r.methods})),
                underestimated_days=sum(r.underestimated_days for r in head),
            )
        )
    return out


def idle_cards_read(
    *, start: date, end: date, deployment: Deployment | None = None
) -> list[IdleTotal]:
    """What the idle card shows, per currency: the fleet's totals, or one
    deployment's (its pool's paid idle where it runs in one: a member has no
    paid idle of its own)."""
    if deployment is None:
        return idle_totals_read(start=start, end=end)
    own = idle_rows_read(start=start, end=end, scopes=("deployment",),
                         names=[deployment.name])  # fmt: skip
    pool = (
        idle_rows_read(
            start=start, end=end, scopes=("pool",), names=[deployment.pool.name]
        )
        if deployment.pool is not None
        else []
    )
    cards = []
    for r in own or pool:
        paid_from = next((p for p in pool if p.currency == r.currency), None)
        src = paid_from if deployment.pool is not None else r
        cards.append(
            IdleTotal(
                currency=r.currency,
                paid_amount=src.paid_amount if src else None,
                paid_gpu_hours=src.paid_gpu_hours if src else None,
                headroom_amount=r.headroom_amount if r.scope == "deployment" else None,
                headroom_gpu_hours=r.headroom_gpu_hours
                if r.scope == "deployment"
                else None,
                missing_days=(src.paid_missing if src else 0) + r.headroom_missing,
                methods=r.methods,
                underestimated_days=r.underestimated_days,
            )
        )
    return cards
