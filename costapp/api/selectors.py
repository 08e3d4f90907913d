"""Reads for the API, through the areas' selectors and the stored figures.

Nothing here computes a figure of its own: unit costs, baselines and idle
dollars are the stored ``UnitCostFigure`` rows; spend is the bills area's
allocation and reconciliation; budgets are economics' statuses; the
overview's cards are the page's own read (``overview_read``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import OuterRef, QuerySet, Subquery

from analytics.allocation import IDLE, UNALLOCATED
from costapp.costs.allocations import (
    allocation_days_read,
    bill_days_read,
    reconciliation_rows_read,
)
from costapp.costs.selectors import Basis
from costapp.days import utc_midnight
from costapp.economics.forecasts.selectors import budget_statuses_read
from costapp.economics.moved import moved_read
from costapp.economics.selectors import overview_read
from costapp.models import AlertEvent, AlertState, Deployment, UnitCostFigure

# The rate card is priced in US dollars (the bills area's reconciliation and
# billed_deployment_days_read read it so); bills carry their own currency.
PROVISIONAL_CURRENCY = "USD"


def figures_read(
    *,
    scope: str,
    grain: str,
    start: date,
    end: date,
    name: str | None = None,
    currency: str | None = None,
) -> QuerySet[UnitCostFigure]:
    rows = UnitCostFigure.objects.filter(
        scope=scope,
        grain=grain,
        period_start__gte=utc_midnight(start),
        period_start__lt=utc_midnight(end),
    )
    if name is not None:
        rows = rows.filter(name=name)
    if currency is not None:
        rows = rows.filter(currency=currency)
    return rows.order_by("name", "currency", "period_start", "pk")


def pool_idle_read(
    *, start: date, end: date, pool: str | None = None
) -> QuerySet[UnitCostFigure]:
    """Idle dollars per pool and UTC day as stored (the pool's ``__idle__``
    share of the bill; null before the day is billed)."""
    return figures_read(scope="pool", grain="day", start=start, end=end, name=pool)


@dataclass(frozen=True)
class SpendRow:
    day: date
    deployment: str
    pool: str
    kind: str  # deployment, idle, unallocated
    currency: str
    status: str  # final, estimated, provisional
    bill: Decimal | None
    provisional: Decimal | None
    gpu_hours: Decimal | None


def spend_days_read(
    *, start: date, end: date, basis: Basis, deployment: str | None = None
) -> list[SpendRow]:
    """Per UTC day and deployment: the allocated bill beside the provisional
    cost; each pool's ``__idle__`` and the ``__unallocated__`` remainder as
    rows of their own, so the bills of a day sum to its bill."""
    status: dict[tuple[date, str], str] = {}
    for b in bill_days_read(start, end, basis):
        key = (b.day, b.currency)
        if b.estimated or status.get(key) == "estimated":
            status[key] = "estimated"
        else:
            status[key] = "final"
    # A pool member's rows name its pool, as the CSV export does.
    pools = dict(Deployment.objects.values_list("name", "pool__name"))
    rows: list[SpendRow] = []
    for r in reconciliation_rows_read(start, end, basis):
        billed = r.billed is not None
        rows.append(
            SpendRow(
                day=r.day,
                deployment=r.deployment,
                pool=pools.get(r.deployment) or "",
                kind="deployment",
                currency=PROVISIONAL_CURRENCY,
                status=status.get((r.day, PROVISIONAL_CURRENCY), "final")
                if billed
                else "provisional",
                bill=r.billed,
                provisional=r.provisional,
                gpu_hours=r.gpu_hours,
            )
        )
    overheads: dict[tuple[date, str, str, str], Decimal] = defaultdict(Decimal)
    for (_account, day, currency), allocation in allocation_days_read(
        start, end, basis
    ).items():
        for share in allocation.shares:
            if share.target == IDLE:
                overheads[(day, IDLE, share.pool, currency)] += share.amount
            elif share.target == UNALLOCATED:
                overheads[(day, UNALLOCATED, "", currency)] += share.amount
    for (day, target, pool, currency), amount in overheads.items():
        rows.append(
            SpendRow(
                day=day,
                deployment=target,
                pool=pool,
                kind="idle" if target == IDLE else "unallocated",
                currency=currency,
                status=status.get((day, currency), "final"),
                bill=amount,
                provisional=None,
                gpu_hours=None,
            )
        )
    if deployment is not None:
        rows = [r for r in rows if r.deployment == deployment]
    rows.sort(key=lambda r: (r.day, r.kind != "deployment", r.deployment, r.pool))
    return rows


@dataclass(frozen=True)
class BudgetRow:
    scope: str
    name: str
    currency: str
    monthly_amount: Decimal
    month: date | None
    as_of: date | None
    spent_to_date: float | None
    spent_share: float | None
    forecast: float | None
    forecast_lower: float | None
    forecast_upper: float | None
    runs_out_on: date | None


def budgets_read(*, today: date) -> list[BudgetRow]:
    out = []
    for s in budget_statuses_read(today=today):
        b, fc = s.budget, s.forecast
        burn = fc.budget_burn_date if fc is not None else None
        out.append(
            BudgetRow(
                scope=b.scope,
                name=b.name,
                currency=b.currency,
                monthly_amount=b.monthly_amount,
                month=fc.month.date() if fc is not None else None,
                as_of=fc.as_of.date() if fc is not None else None,
                spent_to_date=fc.to_date if fc is not None else None,
                spent_share=s.spent_share,
                forecast=fc.point if fc is not None else None,
                forecast_lower=fc.lower if fc is not None else None,
                forecast_upper=fc.upper if fc is not None else None,
                runs_out_on=burn.date() if burn is not None else None,
            )
        )
    return out


def alert_events_read(
    *,
    start: date,
    end: date,
    rule: str | None = None,
    scope_name: str | None = None,
    kind: str | None = None,
) -> QuerySet[AlertEvent]:
    events = AlertEvent.objects.select_related("rule").filter(
        data_time__gte=utc_midnight(start), data_time__lt=utc_midnight(end)
    )
    if rule is not None:
        events = events.filter(rule__name=rule)
    if scope_name is not None:
        events = events.filter(scope_name=scope_name)
    if kind is not None:
        events = events.filter(kind=kind)
    currency = UnitCostFigure.objects.filter(pk=OuterRef("figure_id")).values(
        "currency"
    )[:1]
    return events.annotate(currency=Subquery(currency)).order_by("-data_time", "-pk")


def active_alerts_read() -> QuerySet[AlertState]:
    return (
        AlertState.objects.select_related("rule")
        .filter(state__in=AlertState.ACTIVE)
        .order_by("rule__name", "scope_name")
    )


def moved_rows_read(
    *, start: date, end: date, sort: str, scope: str = "", name: str = ""
) -> list[dict[str, object]]:
    """ "What moved" as the page shows it, one dict per series, with the
    compared days (the end cut to the last complete UTC day)."""
    found = moved_read(start=start, end=end, sort=sort, scope=scope, name=name)
    rows = found.rows
    if scope and not name:
        rows = rows[rows["scope"] == scope]
    compared = {
        "start": found.start,
        "end": found.end,
        "before_start": found.before_start,
        "before_end": found.before_end,
    }
    return [compared | r for r in rows.to_dict("records")]


# The overview's cards are the deployments' direct cost (the page says so
# beside them: economics/present.py DIRECT).
CARD_BASIS = "direct"


@dataclass(frozen=True)
class OverviewCard:
    card: str
    label: str
    unit: str  # money, money_unit (per 1k requests, per 1M tokens), count
    currency: str
    value: float
    previous: float
    change: float
    basis: str
    window_start: date
    window_end: date
    start: date  # the cards' days, [start, end)
    end: date
    previous_start: date  # as many days before them, [previous_start, start)
    previous_end: date
    days: int
    covered: int  # days with a figure
    previous_covered: int
    clocks: str  # of the days' figures, "+"-joined as in moved/
    previous_clocks: str
    partial_today: bool  # the cards' days reach into today (not over yet)


def overview_cards_read(
    *,
    start: date,
    end: date,
    today: date,
    team: str = "",
    deployment: str | None = None,
) -> list[OverviewCard]:
    """The overview's cards for the window [start, end), each against the
    equal days before the cards' own, read as the page reads them."""
    data = overview_read(
        today=end,
        days=(end - start).days,
        team=team,
        deployments=None if deployment is None else [deployment],
    )
    p = data.period
    return [
        OverviewCard(
            card=k.key,
            label=k.label,
            unit=k.unit,
            currency=data.currency,
            value=k.value,
            previous=k.previous,
            change=k.change,
            basis=CARD_BASIS,
            window_start=start,
            window_end=end,
            start=p.start,
            end=p.end,
            previous_start=p.previous_start,
            previous_end=p.start,
            days=p.days,
            covered=p.covered,
            previous_covered=p.previous_covered,
            clocks="+".join(sorted(p.clocks)),
            previous_clocks="+".join(sorted(p.previous_clocks)),
            partial_today=p.end > today,
        )
        for k in data.kpis
    ]
