"""Reads of idle in dollars (``IdleFigure``, written by ``economics.idle``)
and their strings for the templates: the idle page, the overview's card and
the deployment page's card read the same figures the same way."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Q, Sum

from costapp import formatting as fmt
from costapp.economics.idle import UNDERESTIMATES
from costapp.models import Deployment
from costapp.models.economics import IdleFigure

# --- reads -------------------------------------------------------------------------


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


def idle_series_names(deployments: Iterable[str] | None) -> list[str] | None:
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
    # Summed by the database, per series, currency and kind; the few facts
    # that are not sums (methods, flags, notes, the latest capacity) are read
    # from the rows that carry them only.
    known = Q(gpu_hours__isnull=False, amount__isnull=False)
    acc: dict[tuple[str, str, str], dict[str, Any]] = {}

    def series(key: tuple[str, str, str]) -> dict[str, Any]:
        return acc.setdefault(
            key,
            {"paid_h": None, "paid_a": None, "paid_n": 0, "paid_m": 0,
             "head_h": None, "head_a": None, "head_n": 0, "head_m": 0,
             "methods": set(), "under": 0, "cap": None, "notes": set()},
        )  # fmt: skip

    cap_days: dict[tuple[str, str, str], date] = {}
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
    for g in grouped:  # a row per method too: methods come with the sums
        key = (g["scope"], g["name"], g["currency"])
        a = series(key)
        p = "paid" if g["kind"] == "paid" else "head"
        a[f"{p}_n"] += g["n"]
        a[f"{p}_m"] += g["missing"]
        if g["n"] > g["missing"]:
            a[f"{p}_h"] = (a[f"{p}_h"] or 0.0) + g["hours"]
            a[f"{p}_a"] = (a[f"{p}_a"] or Decimal(0)) + g["amount"]
        if g["kind"] == "headroom":
            a["methods"].add(g["method"])
            if g["cap_day"] is not None and g["cap_day"] > cap_days.get(key, date.min):
                cap_days[key] = g["cap_day"]
    headroom = qs.filter(kind="headroom").order_by()
    keys = ("scope", "name", "currency")
    for *key, flags in headroom.exclude(flags=[]).values_list(*keys, "flags"):
        series(tuple(key))["under"] += int(UNDERESTIMATES in (flags or []))  # type: ignore[arg-type]
    notes = headroom.filter(note__startswith="no capacity")
    for *key, note in notes.values_list(*keys, "note").distinct():
        series(tuple(key))["notes"].add(note)  # type: ignore[arg-type]
    if cap_days:
        latest = headroom.filter(
            day__in=set(cap_days.values()), capacity_per_replica__isnull=False
        ).values_list(*keys, "day", "capacity_per_replica")
        for scope, name, cur, day, cap in latest:
            if cap_days.get((scope, name, cur)) == day:
                acc[(scope, name, cur)]["cap"] = cap
    out = []
    for (scope, name, cur), a in sorted(acc.items()):
        team, pool = meta.get(name, ("", "")) if scope == "deployment" else ("", name)
        out.append(
            IdleRow(
                scope=scope, name=name, currency=cur, team=team, pool=pool,
                paid_gpu_hours=a["paid_h"], paid_amount=a["paid_a"],
                paid_days=a["paid_n"], paid_missing=a["paid_m"],
                headroom_gpu_hours=a["head_h"], headroom_amount=a["head_a"],
                headroom_days=a["head_n"], headroom_missing=a["head_m"],
                methods=tuple(sorted(a["methods"])), underestimated_days=a["under"],
                capacity_per_replica=a["cap"], notes=tuple(sorted(a["notes"])),
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


# --- for templates (strings only; shared by the idle page, the overview card
# and the deployment page's card) --------------------------------------------------

METHOD_LABELS = {
    "roofline": "roofline estimate (uncalibrated)",
    "calibrated": "calibrated",
    "bill": "allocated bill",
}


def _methods(methods: Iterable[str]) -> str:
    found = [METHOD_LABELS.get(m, m) for m in methods]
    return ", ".join(found) if found else fmt.MISSING


def idle_row_context(r: IdleRow) -> dict[str, Any]:
    return {
        "scope": r.scope,
        "name": r.name,
        "team": r.team,
        "pool": r.pool,
        "currency": r.currency,
        "paid_gpu_hours": fmt.number(r.paid_gpu_hours),
        "paid": fmt.money(r.paid_amount, r.currency),
        "paid_raw": "" if r.paid_amount is None else str(r.paid_amount),
        "paid_missing": r.paid_missing,
        "paid_none": r.paid_days == 0,
        "headroom_gpu_hours": fmt.number(r.headroom_gpu_hours),
        "headroom": fmt.money(r.headroom_amount, r.currency),
        "headroom_raw": "" if r.headroom_amount is None else str(r.headroom_amount),
        "headroom_missing": r.headroom_missing,
        "method": _methods(r.methods),
        "method_short": ", ".join(r.methods) or fmt.MISSING,
        "roofline": "roofline" in r.methods,
        "underestimated_days": r.underestimated_days,
        "capacity": fmt.number(r.capacity_per_replica, 2),
        "notes": "; ".join(r.notes),
    }


def idle_page_rows(rows: list[IdleRow]) -> list[dict[str, Any]]:
    """Pools, each followed by its members, then deployments outside pools."""
    pools = [r for r in rows if r.scope == "pool"]
    deps = [r for r in rows if r.scope == "deployment"]
    out = []
    for p in pools:
        out.append(idle_row_context(p) | {"member": False})
        out += [idle_row_context(d) | {"member": True}
                for d in deps if d.pool == p.name and d.currency == p.currency]  # fmt: skip
    seen = {(d["name"], d["currency"]) for d in out if d["scope"] == "deployment"}
    out += [idle_row_context(d) | {"member": False}
            for d in deps if (d.name, d.currency) not in seen]  # fmt: skip
    return out


def idle_total_context(t: IdleTotal, title: str) -> dict[str, Any]:
    return {
        "title": title,
        "currency": t.currency,
        "paid": fmt.money(t.paid_amount, t.currency),
        "paid_raw": "" if t.paid_amount is None else str(t.paid_amount),
        "paid_gpu_hours": fmt.number(t.paid_gpu_hours),
        "headroom": fmt.money(t.headroom_amount, t.currency),
        "headroom_raw": "" if t.headroom_amount is None else str(t.headroom_amount),
        "headroom_gpu_hours": fmt.number(t.headroom_gpu_hours),
        "method": _methods(t.methods),
        "roofline": "roofline" in t.methods,
        "underestimated_days": t.underestimated_days,
        "missing_days": t.missing_days,
    }


def idle_cards_read(
    *, start: date, end: date, deployment: Deployment | None = None
) -> list[dict[str, Any]]:
    """The idle card's context (``templates/economics/_idle_card.html``): the
    fleet's totals, or one deployment's (its pool's paid idle where it runs
    in one: a member has no paid idle of its own)."""
    if deployment is None:
        return [
            idle_total_context(t, "Fleet")
            for t in idle_totals_read(start=start, end=end)
        ]
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
        t = IdleTotal(
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
        title = (
            f"{deployment.name} (paid idle: pool {deployment.pool.name})"
            if deployment.pool is not None
            else deployment.name
        )
        cards.append(idle_total_context(t, title))
    return cards
