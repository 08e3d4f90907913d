"""Evaluating every rule once: transitions, claims, the outbox.

For each rule and scope the stored figures are run through
``analytics.alert_rules.transitions`` (the function the backtest runs); the
transitions newer than the state's ``data_time`` are recorded only by the
evaluation whose conditional UPDATE on ``AlertState.version`` changed one row
(healthchecks' process_one_flip). Everything runs in one transaction, so the
events and their Delivery rows commit together with the claim, and a second
worker blocks on the UPDATE, then finds the version moved and records nothing.

History never pages anyone: a transition whose data time is older than two of
the rule's periods is recorded as not sent ("historical") unless ``replay``.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Q

from analytics.alert_rules import (
    Outcome,
    Period,
    RuleSpec,
    Transition,
    budget_burn,
    stale,
    transitions,
)
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertState,
    Budget,
    Channel,
    Delivery,
    Deployment,
    IngestRun,
    Silence,
    UnitCostFigure,
)

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


@dataclass(frozen=True)
class Series:
    name: str
    periods: list[Period]
    figures: dict[datetime, tuple[int, str]]  # period start -> (figure pk, cause)


def _f(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


def rule_series(rule: AlertRule, *, start: datetime, end: datetime) -> Iterator[Series]:
    """The stored figures a rule watches, one series per scope name."""
    rows = UnitCostFigure.objects.filter(
        scope=rule.scope,
        grain=rule.grain,
        period_start__gte=start,
        period_start__lt=end,
    )
    if rule.scope_name:
        rows = rows.filter(name=rule.scope_name)
    field = VALUE_FIELD[rule.metric]
    by_name: dict[str, list[UnitCostFigure]] = defaultdict(list)
    for row in rows.order_by("name", "period_start"):
        by_name[row.name].append(row)
    budgets = {
        b.name: float(b.monthly_amount) for b in Budget.objects.filter(scope=rule.scope)
    }
    for name, figures in by_name.items():
        values: list[float | None] = [_f(getattr(f, field)) for f in figures]
        if rule.metric == "budget_burn":
            if name not in budgets:
                continue
            values = budget_burn(
                [(f.period_start, v) for f, v in zip(figures, values, strict=True)],
                budgets[name],
            )
        unit = rule.metric == "cost_per_1k_requests"
        tokens = rule.metric == "cost_per_1m_tokens"
        periods = [
            Period(
                start=f.period_start,
                value=v,
                baseline=f.baseline
                if unit
                else (f.baseline_per_1m_tokens if tokens else None),
                lower=f.lower if unit else None,
                upper=f.upper if unit else None,
                volume=f.requests,
                flag=f.flag,
            )
            for f, v in zip(figures, values, strict=True)
        ]
        yield Series(name, periods, {f.period_start: (f.pk, f.cause) for f in figures})


def source_ends() -> dict[str, datetime | None]:
    """Newest data end per source: a Cost Explorer account, a Prometheus, the
    demo. FOCUS files are uploads, not a feed, and are never stale."""
    out: dict[str, datetime | None] = {}
    rows = (
        IngestRun.objects.exclude(source="focus")
        .values("source", "target")
        .annotate(
            end=Max(
                "window_end",
                filter=Q(status__in=[IngestRun.SUCCEEDED, IngestRun.PARTIAL]),
            )
        )
    )
    for row in rows:
        key = (
            f"cost_explorer {row['target']}"
            if row["source"] == "cost_explorer"
            else row["source"]
        )
        end = row["end"]
        if key not in out or (end and (out[key] is None or end > out[key])):  # type: ignore[operator]
            out[key] = end
    return out


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


def _claim_and_record(
    *,
    rule: AlertRule,
    name: str,
    outcome: Outcome,
    figures: dict[datetime, tuple[int, str]],
    now: datetime,
    replay: bool,
    teams: dict[str, str],
    reason: str = "",
) -> list[AlertEvent]:
    state, _ = AlertState.objects.get_or_create(rule=rule, scope_name=name)
    new: list[Transition] = [
        t
        for t in outcome.transitions
        if state.data_time is None or t.at > state.data_time
    ]
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
    period = GRAIN[rule.grain]
    events = []
    for t in new:
        figure_id, cause = figures.get(t.at, (None, ""))
        not_sent = ""
        if not replay and t.at + period < now - 2 * period:
            not_sent = "historical"
        elif t.kind == "resolved" and not rule.notify_resolved:
            not_sent = "resolve not notified"
        elif _silenced(rule, name, now, teams):
            not_sent = "silenced"
        events.append(
            AlertEvent(
                rule=rule,
                scope_name=name,
                kind=t.kind,
                data_time=t.at,
                value=t.value,
                baseline=t.baseline,
                reason="restated" if restated and t is new[-1] else reason,
                explanation=cause,
                figure_id=figure_id,
                not_sent=not_sent,
                created_at=now,
            )
        )
    AlertEvent.objects.bulk_create(events)
    if any(not e.not_sent for e in events):
        AlertState.objects.filter(pk=state.pk).update(last_sent=now)
    return events


@transaction.atomic
def alert_rules_evaluate(
    *, now: datetime, replay: bool = False, rule_ids: list[int] | None = None
) -> list[int]:
    """Evaluate every enabled rule once; returns the Delivery ids to send."""
    rules = AlertRule.objects.filter(enabled=True).prefetch_related("channels")
    if rule_ids is not None:
        rules = rules.filter(pk__in=rule_ids)
    teams = dict(Deployment.objects.values_list("name", "team"))
    recorded: list[_Pending] = []
    ends = None
    for rule in rules:
        spec = rule_spec(rule)
        if rule.metric == "staleness":
            ends = source_ends() if ends is None else ends
            for source, end in sorted(ends.items()):
                max_age = timedelta(hours=rule.threshold or 0)
                hit = stale(last_data_end=end, now=now, max_age=max_age)
                age = (now - end).total_seconds() / 3600 if end else None
                # One period per evaluation, in wall-clock time: staleness is
                # about the absence of data periods.
                outcome = transitions(
                    [Period(start=now, value=age if hit else 0.0)],
                    RuleSpec(condition="threshold", threshold=0.0),
                )
                state = AlertState.objects.filter(rule=rule, scope_name=source).first()
                if state and state.state == "firing" and hit:
                    continue  # still stale: one alert per source
                if not hit and not (state and state.state == "firing"):
                    continue
                if not hit:
                    outcome = Outcome(
                        (Transition("resolved", now, age, None),), "inactive", None, ()
                    )
                events = _claim_and_record(
                    rule=rule,
                    name=source,
                    outcome=outcome,
                    figures={},
                    now=now,
                    replay=True,  # staleness is always about now
                    teams=teams,
                    reason="stale" if hit else "",
                )
                recorded.append(_Pending(rule, events))
            continue
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
            )
            recorded.append(_Pending(rule, events))
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
