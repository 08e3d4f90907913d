"""Reads of alerts: rules, channels, the notification log, the backtest.

``alert_rule_backtest`` runs the live evaluation's function over stored
figures and writes nothing, so a rule can be tuned before anyone is paged.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import QuerySet

from analytics.alert_rules import transitions
from costapp.alerts.evaluation import figures_of, rule_series, rule_spec
from costapp.days import utc_midnight
from costapp.models import AlertRule, Channel, Delivery, Deployment, Silence
from costapp.models.alerts import BUDGET_FORECAST_METRICS, STALENESS_METRICS


@dataclass(frozen=True)
class Incident:
    name: str
    fired_at: datetime
    resolved_at: datetime | None
    repeats: int
    value: float | None
    baseline: float | None
    explanation: str
    figure_id: int | None


@dataclass(frozen=True)
class Backtest:
    days: int
    incidents: tuple[Incident, ...]
    series: int
    note: str = ""

    @property
    def sentence(self) -> str:
        if self.note:
            return self.note
        n = len(self.incidents)
        head = (
            f"over the last {self.days} days this rule would have fired "
            f"{n} time{'s' if n != 1 else ''}"
        )
        if not n:
            return f"{head} (over {self.series} series)"
        parts = []
        for i in self.incidents[:5]:
            text = f"{i.fired_at:%b %d} {i.name}"
            if i.resolved_at:
                hours = (i.resolved_at - i.fired_at).total_seconds() / 3600
                text += f", resolved after {hours:.0f} h"
            else:
                text += ", still firing"
            parts.append(text)
        more = ", ..." if n > 5 else ""
        return f"{head} ({'; '.join(parts)}{more})"


def alert_rule_backtest(*, rule: AlertRule, now: datetime, days: int = 90) -> Backtest:
    """What the rule would have done over the stored figures (no writes; the
    rule need not be saved)."""
    if rule.metric in STALENESS_METRICS:
        return Backtest(
            days,
            (),
            0,
            note="staleness is about where the data ends now, not about figures: "
            "no backtest",
        )
    if rule.metric in BUDGET_FORECAST_METRICS:
        return Backtest(
            days,
            (),
            0,
            note="only the latest month-end forecast is stored, not its history: "
            "no backtest",
        )
    spec = rule_spec(rule)
    found: list[Incident] = []
    count = 0
    for series in rule_series(rule, start=now - timedelta(days=days), end=now):
        count += 1
        outcome = transitions(series.periods, spec)
        named = figures_of(
            series.figure_ids[t.at] for t in outcome.transitions if t.kind == "firing"
        )
        current: dict[str, object] | None = None
        for t in outcome.transitions:
            if t.kind == "firing":
                figure = named.get(series.figure_ids.get(t.at, -1))
                current = {
                    "name": series.name,
                    "fired_at": t.at,
                    "repeats": 0,
                    "value": t.value,
                    "baseline": t.baseline,
                    "explanation": figure.cause if figure else "",
                    "figure_id": figure.pk if figure else None,
                }
            elif t.kind == "repeat" and current is not None:
                current["repeats"] = int(current["repeats"]) + 1  # type: ignore[call-overload]
            elif t.kind == "resolved" and current is not None:
                found.append(Incident(resolved_at=t.at, **current))  # type: ignore[arg-type]
                current = None
        if current is not None:
            found.append(Incident(resolved_at=None, **current))  # type: ignore[arg-type]
    found.sort(key=lambda i: i.fired_at)
    return Backtest(days, tuple(found), count)


def rules_list() -> QuerySet[AlertRule]:
    return AlertRule.objects.prefetch_related("channels", "states")


def channels_list() -> QuerySet[Channel]:
    return Channel.objects.all()


def silences_active(*, now: datetime) -> QuerySet[Silence]:
    return Silence.objects.filter(ends_at__gt=now)


def notification_log(
    *,
    channel_id: int | None = None,
    rule_id: int | None = None,
    status: str | None = None,
    start: date | None = None,
    end: date | None = None,
    scope_names: Collection[str] | None = None,
    limit: int = 200,
) -> list[Delivery]:
    """Deliveries, latest first; ``start``/``end`` (UTC days, end exclusive)
    on when they were created, ``scope_names`` on their events' series (a
    team or deployment name)."""
    rows = Delivery.objects.select_related("channel").prefetch_related("events__rule")
    if start is not None:
        rows = rows.filter(created_at__gte=utc_midnight(start))
    if end is not None:
        rows = rows.filter(created_at__lt=utc_midnight(end))
    if scope_names is not None:
        rows = rows.filter(events__scope_name__in=list(scope_names)).distinct()
    if channel_id:
        rows = rows.filter(channel_id=channel_id)
    if rule_id:
        rows = rows.filter(events__rule_id=rule_id).distinct()
    if status:
        rows = rows.filter(status=status)
    return list(rows[:limit])


SILENCE_SCOPES = ("deployment", "team", "rule")


def silenceable(scope: str) -> set[str]:
    """What a silence of ``scope`` may name: the rules, deployments or teams
    that exist (a name that matched nothing would silence nothing)."""
    if scope == "rule":
        return set(AlertRule.objects.values_list("name", flat=True))
    field = "name" if scope == "deployment" else "team"
    return {n for n in Deployment.objects.values_list(field, flat=True) if n}


def silenceable_all() -> list[tuple[str, str]]:
    """(name, scope) of everything a silence may name, for the form's list."""
    return sorted(
        {(name, scope) for scope in SILENCE_SCOPES for name in silenceable(scope)}
    )
