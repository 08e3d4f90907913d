"""Evaluating every rule once: transitions, claims, the outbox.

For each rule and scope the stored figures are run through
``analytics.alert_rules.transitions`` (the function the backtest runs); the
transitions newer than the state's ``data_time`` are recorded only by the
evaluation whose conditional UPDATE on ``AlertState.version`` changed one row
(healthchecks' process_one_flip). Everything runs in one transaction, so the
events and their Delivery rows commit together with the claim, and a second
worker blocks on the UPDATE, then finds the version moved and records nothing.

Only closed periods are judged: a figure still in progress, or computed from
data read before its period ended plus the settle delay
(``UnitCostFigure.complete``), is passed over. A transition that would not
change the recorded state (a firing alert firing again after late data moved
it an hour) is not recorded twice.

History is not news: a transition is recorded as not sent ("historical") only
when its figure stood as it is before the rule existed or before the rule's
last evaluation (``known_since``), so that evaluation judged it already. A
figure that arrives late (an outage, a dead worker, a backfill, a restated
bill day) is news however old its period, and its event says how late it is
(``late_s``: from the period's close, when longer than the schedule promises).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from analytics.alert_rules import (
    Outcome,
    Period,
    RuleSpec,
    Transition,
    budget_burn,
    stale,
    transitions,
)
from costapp.alerts.staleness import staleness_ends
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertRuleEvaluated,
    AlertState,
    Budget,
    Channel,
    Delivery,
    Deployment,
    Silence,
    UnitCostFigure,
)
from costapp.models.alerts import STALENESS_METRICS
from costapp.schedule import page_bound_s

GRAIN = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
LOOKBACK = {"hour": timedelta(days=14), "day": timedelta(days=95)}
REPLAY_LOOKBACK = timedelta(days=400)
VALUE_FIELD = {
    "cost_per_1k_requests": "cost_per_1k_requests",
    "cost_per_1m_tokens": "cost_per_1m_tokens",
    "daily_spend": "cost",
    "idle_cost": "idle_cost",
    "budget_burn": "cost",
}


def rule_spec(rule: AlertRule) -> RuleSpec:
    return RuleSpec(
        condition=rule.condition,  # type: ignore[arg-type]
        direction=rule.direction,  # type: ignore[arg-type]
        ratio=rule.ratio,
        threshold=rule.threshold,
        for_periods=max(1, rule.for_periods),
        keep_firing_for=rule.keep_firing_for,
        repeat=timedelta(minutes=rule.repeat_minutes),
        min_volume=rule.min_requests,
        include_traffic=rule.include_traffic,
    )


def settle() -> timedelta:
    return timedelta(seconds=settings.COSTAPP_SETTLE_S)


def closes_at(start: datetime, grain: str) -> datetime:
    """When a period is closed: its end plus the settle delay."""
    return start + GRAIN[grain] + settle()


@dataclass(frozen=True)
class Figure:
    pk: int
    cause: str
    known_since: datetime  # when it first stood with these values, closed


@dataclass(frozen=True)
class Series:
    name: str
    periods: list[Period]
    figures: dict[datetime, Figure]  # by period start


def _f(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


FIGURE_FIELDS = (
    "pk", "name", "period_start", "cost_per_1k_requests", "cost_per_1m_tokens",
    "cost", "idle_cost", "baseline", "baseline_per_1m_tokens", "lower", "upper",
    "requests", "flag", "cause", "complete", "known_since", "computed_at",
)  # fmt: skip


def rule_series(
    rule: AlertRule, *, start: datetime, end: datetime, now: datetime | None = None
) -> Iterator[Series]:
    """The stored figures a rule watches from ``start`` to ``end``, one series
    per scope name; a period is closed when its figure is complete and its
    end plus the settle delay is past at ``now`` (default ``end``)."""
    now = now or end
    rows = UnitCostFigure.objects.filter(
        scope=rule.scope,
        grain=rule.grain,
        period_start__gte=start,
        period_start__lt=end,
    )
    if rule.scope_name:
        rows = rows.filter(name=rule.scope_name)
    field = VALUE_FIELD[rule.metric]
    by_name: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows.order_by("name", "period_start").values(*FIGURE_FIELDS):
        by_name[str(row["name"])].append(row)
    budgets = {
        b.name: float(b.monthly_amount) for b in Budget.objects.filter(scope=rule.scope)
    }
    unit = rule.metric == "cost_per_1k_requests"
    tokens = rule.metric == "cost_per_1m_tokens"
    last_closed = now - GRAIN[rule.grain] - settle()
    for name, figures in by_name.items():
        values: list[float | None] = [_f(f[field]) for f in figures]
        if rule.metric == "budget_burn":
            if name not in budgets:
                continue
            values = budget_burn(
                [(f["period_start"], v) for f, v in zip(figures, values, strict=True)],  # type: ignore[misc]
                budgets[name],
            )
        periods = [
            Period(
                start=f["period_start"],  # type: ignore[arg-type]
                value=v,
                baseline=_f(
                    f["baseline"]
                    if unit
                    else (f["baseline_per_1m_tokens"] if tokens else None)
                ),
                lower=_f(f["lower"]) if unit else None,
                upper=_f(f["upper"]) if unit else None,
                volume=_f(f["requests"]),
                flag=str(f["flag"]),
                closed=bool(f["complete"]) and f["period_start"] <= last_closed,  # type: ignore[operator]
            )
            for f, v in zip(figures, values, strict=True)
        ]
        yield Series(
            name,
            periods,
            {
                f["period_start"]: Figure(  # type: ignore[misc]
                    int(f["pk"]),  # type: ignore[call-overload]
                    str(f["cause"]),
                    f["known_since"] or f["computed_at"],  # type: ignore[arg-type]
                )
                for f in figures
            },
        )


@dataclass
class _Pending:
    rule: AlertRule
    events: list[AlertEvent]


def _silenced(rule: AlertRule, name: str, at: datetime, teams: dict[str, str]) -> bool:
    q = Q(scope="rule", name=rule.name)
    if rule.scope == "deployment":
        q |= Q(scope="deployment", name=name)
        if name in teams:
            q |= Q(scope="team", name=teams[name])
    elif rule.scope == "team":
        q |= Q(scope="team", name=name)
    return Silence.objects.filter(q, starts_at__lte=at, ends_at__gt=at).exists()


def state_changes(state: str, found: Sequence[Transition]) -> list[Transition]:
    """The transitions that change ``state`` in turn: a firing alert does not
    fire again (late data moved its first breaching period), an inactive one
    neither resolves nor repeats."""
    out: list[Transition] = []
    firing = state == "firing"
    for t in found:
        if (t.kind == "firing") == firing and t.kind != "repeat":
            continue
        if t.kind == "repeat" and not firing:
            continue
        out.append(t)
        firing = t.kind != "resolved"
    return out


def _claim_and_record(
    *,
    rule: AlertRule,
    name: str,
    outcome: Outcome,
    figures: dict[datetime, Figure],
    now: datetime,
    replay: bool,
    teams: dict[str, str],
    known_by: datetime | None,
    reason: str = "",
) -> list[AlertEvent]:
    state, _ = AlertState.objects.get_or_create(rule=rule, scope_name=name)
    new = state_changes(
        state.state,
        [
            t
            for t in outcome.transitions
            if state.data_time is None or t.at > state.data_time
        ],
    )
    restated = (
        state.state == "firing"
        and outcome.state != "firing"
        and not any(t.kind == "resolved" for t in new)
        and not any(t.kind == "firing" for t in new)
    )
    if restated:
        latest = max(figures) if figures else now
        new.append(
            Transition("resolved", max(latest, state.data_time or latest), None, None)
        )
    if not new and state.state == outcome.state:
        return []
    data_time = max([t.at for t in new], default=state.data_time)
    claimed = AlertState.objects.filter(pk=state.pk, version=state.version).update(
        state=outcome.state,
        since=outcome.since,
        data_time=data_time,
        version=state.version + 1,
    )
    if claimed != 1:
        return []  # another evaluation recorded these transitions
    period = GRAIN.get(rule.grain, GRAIN["hour"])
    bound = timedelta(seconds=page_bound_s())
    events = []
    for t in new:
        figure = figures.get(t.at)
        not_sent = ""
        late_s = None
        # An evaluation judged the figure if it ran after the figure stood
        # as it is and after its period closed (before, it was passed over).
        if (
            not replay
            and figure is not None
            and known_by is not None
            and max(figure.known_since, t.at + period + settle()) <= known_by
        ):
            not_sent = "historical"
        elif t.kind == "resolved" and not rule.notify_resolved:
            not_sent = "resolve not notified"
        elif _silenced(rule, name, now, teams):
            not_sent = "silenced"
        if figure is not None and not_sent != "historical":
            delay = now - (t.at + period + settle())
            if delay > bound:
                late_s = delay.total_seconds()
        events.append(
            AlertEvent(
                rule=rule,
                scope_name=name,
                kind=t.kind,
                data_time=t.at,
                value=t.value,
                baseline=t.baseline,
                reason="restated" if restated and t is new[-1] else reason,
                explanation=figure.cause if figure else "",
                figure_id=figure.pk if figure else None,
                not_sent=not_sent,
                late_s=late_s,
                created_at=now,
            )
        )
    AlertEvent.objects.bulk_create(events)
    if any(not e.not_sent for e in events):
        AlertState.objects.filter(pk=state.pk).update(last_sent=now)
    return events


def _staleness(
    rule: AlertRule, *, now: datetime, teams: dict[str, str]
) -> list[AlertEvent]:
    """One firing per feed whose data ends longer ago than the rule allows,
    one resolve when data arrives again; always about now."""
    max_age = timedelta(hours=rule.threshold or 0)
    states = {s.scope_name: s.state for s in AlertState.objects.filter(rule=rule)}
    events: list[AlertEvent] = []
    for name, end in sorted(staleness_ends(rule).items()):
        hit = stale(last_data_end=end, now=now, max_age=max_age)
        firing = states.get(name) == "firing"
        if hit == firing:
            continue  # still stale (one alert per feed), or still fresh
        age = (now - end).total_seconds() / 3600 if end else None
        outcome = (
            Outcome((Transition("firing", now, age, None),), "firing", now, ())
            if hit
            else Outcome(
                (Transition("resolved", now, age, None),), "inactive", None, ()
            )
        )
        events += _claim_and_record(
            rule=rule,
            name=name,
            outcome=outcome,
            figures={},
            now=now,
            replay=True,
            teams=teams,
            known_by=None,
            reason="stale" if hit else "",
        )
    return events


@transaction.atomic
def alert_rules_evaluate(
    *, now: datetime, replay: bool = False, rule_ids: list[int] | None = None
) -> list[int]:
    """Evaluate every enabled rule once; returns the Delivery ids to send."""
    rules = AlertRule.objects.filter(enabled=True).prefetch_related("channels")
    if rule_ids is not None:
        rules = rules.filter(pk__in=rule_ids)
    rules = rules.select_related("evaluated")
    teams = dict(Deployment.objects.values_list("name", "team"))
    recorded: list[_Pending] = []
    for rule in rules:
        if rule.metric in STALENESS_METRICS:
            recorded.append(_Pending(rule, _staleness(rule, now=now, teams=teams)))
            continue
        spec = rule_spec(rule)
        evaluated = getattr(rule, "evaluated", None)
        known_by = max(
            [rule.created_at, *([evaluated.at] if evaluated is not None else [])]
        )
        lookback = REPLAY_LOOKBACK if replay else LOOKBACK[rule.grain]
        for series in rule_series(rule, start=now - lookback, end=now):
            outcome = transitions(series.periods, spec)
            events = _claim_and_record(
                rule=rule,
                name=series.name,
                outcome=outcome,
                figures=series.figures,
                now=now,
                replay=replay,
                teams=teams,
                known_by=known_by,
            )
            recorded.append(_Pending(rule, events))
    AlertRuleEvaluated.objects.bulk_create(
        [AlertRuleEvaluated(rule=rule, at=now) for rule in rules],
        update_conflicts=True,
        unique_fields=["rule"],
        update_fields=["at"],
    )
    return _deliveries_create(recorded, now=now)


def _deliveries_create(recorded: list[_Pending], *, now: datetime) -> list[int]:
    """One notification per channel for this evaluation (Alertmanager's
    group_by), within the channel's hourly cap; the unsent kept in the log."""
    to_send: dict[int, list[AlertEvent]] = defaultdict(list)
    unsent: dict[int, list[AlertEvent]] = defaultdict(list)
    channels: dict[int, Channel] = {}
    for item in recorded:
        for channel in item.rule.channels.all():
            channels[channel.pk] = channel
            for event in item.events:
                (unsent if event.not_sent else to_send)[channel.pk].append(event)
    ids = []
    for pk, channel in channels.items():
        if events := to_send.get(pk):
            recent = Delivery.objects.filter(
                channel=channel,
                is_test=False,
                created_at__gte=now - timedelta(hours=1),
            ).exclude(status=Delivery.NOT_SENT)
            if channel.disabled_at is not None:
                _outbox(channel, events, now, Delivery.NOT_SENT, "channel disabled")
            elif recent.count() >= channel.hourly_cap:
                _outbox(channel, events, now, Delivery.NOT_SENT, "hourly cap")
            else:
                ids.append(_outbox(channel, events, now, Delivery.PENDING, "").pk)
        if events := unsent.get(pk):
            reasons = sorted({e.not_sent for e in events})
            _outbox(channel, events, now, Delivery.NOT_SENT, ", ".join(reasons))
    return ids


def _outbox(
    channel: Channel, events: list[AlertEvent], now: datetime, status: str, reason: str
) -> Delivery:
    delivery = Delivery.objects.create(
        channel=channel,
        webhook_id=f"msg_{uuid.uuid4().hex}",
        status=status,
        reason=reason,
        created_at=now,
    )
    delivery.events.set(events)
    return delivery
