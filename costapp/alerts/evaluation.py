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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from analytics.alert_rules import (
    BUDGET_FORECAST_FROM_DAY,
    Outcome,
    Period,
    RuleSpec,
    Transition,
    budget_burn,
    budget_forecast_breach,
    burn_day,
    stale,
    transitions,
)
from costapp.alerts.staleness import staleness_ends
from costapp.days import utc_midnight
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertRuleEvaluated,
    AlertState,
    Budget,
    Channel,
    Delivery,
    Deployment,
    MonthForecastFigure,
    Silence,
    UnitCostFigure,
)
from costapp.models.alerts import BUDGET_FORECAST_METRICS, STALENESS_METRICS
from costapp.models.functions import Epoch
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
        reads_flag=rule.metric == "cost_per_1k_requests",
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
    # The closed periods' figures by period start: transitions are judged on
    # closed periods only, and a restated resolution is dated at the latest
    # of them (dated at the hour in progress, it would pass over that hour's
    # firing when it closes).
    figure_ids: dict[datetime, int]


def _f(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


def rule_series(
    rule: AlertRule, *, start: datetime, end: datetime, now: datetime | None = None
) -> Iterator[Series]:
    """The stored figures a rule watches from ``start`` to ``end``, one series
    per scope name; a period is closed when its figure is complete and its
    end plus the settle delay is past at ``now`` (default ``end``).

    Only what the state machine reads is read (a rule over 1,000 deployments
    reads 336,000 hours every evaluation): period starts as epoch seconds,
    the value, its baseline and band, the volume, the flag; causes and
    ``known_since`` are read for the few periods a transition names
    (``figures_of``)."""
    now = now or end
    rows = UnitCostFigure.objects.filter(
        scope=rule.scope,
        grain=rule.grain,
        period_start__gte=start,
        period_start__lt=end,
    )
    if rule.scope_name:
        rows = rows.filter(name=rule.scope_name)
    unit = rule.metric == "cost_per_1k_requests"
    tokens = rule.metric == "cost_per_1m_tokens"
    baseline = "baseline" if unit else ("baseline_per_1m_tokens" if tokens else None)
    columns = [
        "name", "pk", "epoch", VALUE_FIELD[rule.metric], baseline or "pk",
        "lower" if unit else "pk", "upper" if unit else "pk", "requests", "flag",
        "complete", "parts",
    ]  # fmt: skip
    by_name: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in (
        rows.annotate(epoch=Epoch("period_start"))
        .order_by("name", "period_start")
        .values_list(*columns)
    ):
        by_name[row[0]].append(row)
    budgets = {
        b.name: float(b.monthly_amount) for b in Budget.objects.filter(scope=rule.scope)
    }
    last_closed = (now - GRAIN[rule.grain] - settle()).timestamp()
    for name, figures in by_name.items():
        starts = [datetime.fromtimestamp(f[2], UTC) for f in figures]
        values: list[float | None] = [_f(f[3]) for f in figures]
        if rule.metric == "budget_burn":
            if name not in budgets:
                continue
            values = budget_burn(list(zip(starts, values, strict=True)), budgets[name])
        periods = [
            Period(
                start=at,
                value=v,
                baseline=_f(f[4]) if baseline else None,
                lower=_f(f[5]) if unit else None,
                upper=_f(f[6]) if unit else None,
                volume=_f(f[7]),
                flag=f[8],
                closed=f[9] and f[2] <= last_closed,
                price_part=_f((f[10] or {}).get("price")),
            )
            for f, at, v in zip(figures, starts, values, strict=True)
        ]
        ids = {p.start: f[1] for f, p in zip(figures, periods, strict=True) if p.closed}
        yield Series(name, periods, ids)


def _reopened(state: AlertState, series: Series) -> bool:
    """Whether the period a firing alert was last judged on is open again
    (late data rewrote it incomplete): the alert holds until it is judged
    again, neither resolved as restated nor fired anew when it closes."""
    at = state.data_time
    return (
        state.state == "firing"
        and at is not None
        and at not in series.figure_ids
        and any(p.start == at for p in series.periods)
    )


def figures_of(ids: Iterable[int]) -> dict[int, Figure]:
    """The cause and ``known_since`` of the figures transitions name."""
    return {
        pk: Figure(pk, cause, known or computed)
        for pk, cause, known, computed in UnitCostFigure.objects.filter(
            pk__in=list(ids)
        ).values_list("pk", "cause", "known_since", "computed_at")
    }


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


def states_of(rule: AlertRule, names: Iterable[str]) -> dict[str, AlertState]:
    """The rule's state per scope name, the missing ones created (inactive):
    two queries, whatever the number of series."""
    wanted = set(names)
    have = {s.scope_name: s for s in AlertState.objects.filter(rule=rule)}
    missing = wanted - have.keys()
    if missing:
        AlertState.objects.bulk_create(
            [AlertState(rule=rule, scope_name=n) for n in sorted(missing)],
            ignore_conflicts=True,
        )
        have = {s.scope_name: s for s in AlertState.objects.filter(rule=rule)}
    return have


def _claim_and_record(
    *,
    rule: AlertRule,
    state: AlertState,
    outcome: Outcome,
    figure_ids: dict[datetime, int],
    now: datetime,
    replay: bool,
    teams: dict[str, str],
    known_by: datetime | None,
    reason: str = "",
    explanations: dict[str, str] | None = None,
) -> list[AlertEvent]:
    name = state.scope_name
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
        latest = max(figure_ids) if figure_ids else now
        new.append(
            Transition("resolved", max(latest, state.data_time or latest), None, None)
        )
    if not new and state.state == outcome.state:
        return []
    details = figures_of(figure_ids[t.at] for t in new if t.at in figure_ids)
    data_time = max([t.at for t in new], default=state.data_time)
    if restated and state.since is not None:
        # The periods from the restated run's start are judged afresh: one
        # restated back into breach (later data, a corrected bill) is news.
        data_time = state.since - timedelta(microseconds=1)
    cleared = {}
    if outcome.state == "inactive":  # resolved: an acknowledgement ends with it
        cleared = {"acknowledged_by": "", "acknowledged_at": None}
    claimed = AlertState.objects.filter(pk=state.pk, version=state.version).update(
        state=outcome.state,
        since=outcome.since,
        data_time=data_time,
        version=state.version + 1,
        **cleared,
    )
    if claimed != 1:
        return []  # another evaluation recorded these transitions
    period = GRAIN.get(rule.grain, GRAIN["hour"])
    bound = timedelta(seconds=page_bound_s())
    events = []
    firing_sent: bool | None = None  # of a firing among ``new``, if any
    for t in new:
        figure = details.get(figure_ids.get(t.at, -1))
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
        elif t.kind == "resolved" and not (
            firing_sent if firing_sent is not None else _firing_sent(rule, name)
        ):
            # As Alertmanager: a resolution goes to whoever was told of the
            # firing (not one that was history, silenced or held back).
            not_sent = "firing not sent"
        elif _silenced(rule, name, now, teams):
            not_sent = "silenced"
        elif t.kind == "repeat" and state.acknowledged_at is not None:
            not_sent = "acknowledged"
        if figure is not None and not_sent != "historical":
            delay = now - (t.at + period + settle())
            if delay > bound:
                late_s = delay.total_seconds()
        if t.kind == "firing":
            firing_sent = not not_sent
        events.append(
            AlertEvent(
                rule=rule,
                scope_name=name,
                kind=t.kind,
                data_time=t.at,
                value=t.value,
                baseline=t.baseline,
                reason="restated" if restated and t is new[-1] else reason,
                explanation=figure.cause
                if figure
                else (explanations or {}).get(t.kind, ""),
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


def _firing_sent(rule: AlertRule, name: str) -> bool:
    """Whether anyone was told that the alert now resolving fires: its
    latest firing, or a repeat since (after a silence ended), was sent."""
    events = AlertEvent.objects.filter(rule=rule, scope_name=name)
    latest = events.filter(kind="firing").order_by("-created_at", "-pk").first()
    return latest is not None and (
        events.filter(
            kind__in=("firing", "repeat"),
            created_at__gte=latest.created_at,
            not_sent="",
        ).exists()
    )


def _staleness(
    rule: AlertRule, *, now: datetime, teams: dict[str, str]
) -> list[AlertEvent]:
    """One firing per feed whose data ends longer ago than the rule allows,
    one resolve when data arrives again; always about now."""
    max_age = timedelta(hours=rule.threshold or 0)
    ends = staleness_ends(rule)
    states = states_of(rule, ends)
    events: list[AlertEvent] = []
    for name, end in sorted(ends.items()):
        hit = stale(last_data_end=end, now=now, max_age=max_age)
        firing = states[name].state == "firing"
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
            state=states[name],
            outcome=outcome,
            figure_ids={},
            now=now,
            replay=True,
            teams=teams,
            known_by=None,
            reason="stale" if hit else "",
        )
    return events


def _budget_forecast(
    rule: AlertRule, *, now: datetime, teams: dict[str, str]
) -> list[AlertEvent]:
    """Per budget in the rule's scope: one firing when the stored month-end
    forecast (its 80% lower bound for ``budget_forecast_lower``) passes the
    rule's share of the budget, judged from the 5th UTC day; one resolve when
    it falls back. One episode per budget and month: an alert still firing
    when the month turns is resolved, and the new month is judged anew."""
    today = now.astimezone(UTC).date()
    month = today.replace(day=1)
    month_start = utc_midnight(month)
    share = rule.threshold or 0.0
    budgets = Budget.objects.filter(scope=rule.scope)
    if rule.scope_name:
        budgets = budgets.filter(name=rule.scope_name)
    by_name = {
        b.name if b.currency == "USD" else f"{b.name} {b.currency}": b for b in budgets
    }
    forecasts = {
        (f.name, f.currency): f
        for f in MonthForecastFigure.objects.filter(
            scope=rule.scope,
            month=month,
            name__in=[b.name for b in by_name.values()],
        )
    }
    lower = rule.metric == "budget_forecast_lower"
    states = states_of(rule, by_name)
    events: list[AlertEvent] = []
    for name, budget in sorted(by_name.items()):
        state = states[name]
        firing = state.state == "firing"
        # An episode is a budget's month: last month's alert ends with it.
        ended = firing and (state.since is None or state.since < month_start)
        new: list[Transition] = []
        texts: dict[str, str] = {}
        if ended:
            new.append(Transition("resolved", now, None, None))
            texts["resolved"] = f"the month ended; {month:%B %Y} is judged anew"
            firing = False
        fc = forecasts.get((budget.name, budget.currency))
        if today.day >= BUDGET_FORECAST_FROM_DAY and fc is not None:
            amount = float(budget.monthly_amount)
            value = fc.lower if lower else fc.point
            hit = budget_forecast_breach(forecast=value, budget=amount, share=share)
            burn = burn_day(fc.path, amount)
            text = (
                f"month-end forecast {'(80% lower bound) ' if lower else ''}"
                f"{value:,.2f} {budget.currency} is {value / amount:.0%} of the "
                f"{amount:,.2f} {budget.currency} budget (rule: {share:.0%}) "
                f"as of {fc.as_of:%Y-%m-%d}; "
                + (f"runs out on {burn}" if burn else "does not run out this month")
            )
            if hit and not firing:
                new.append(Transition("firing", now, value, amount))
                texts["firing"] = text
            elif firing and not hit:
                new.append(Transition("resolved", now, value, amount))
                texts["resolved"] = text
            firing = hit
        if not new:
            continue
        outcome = Outcome(
            tuple(new), "firing" if firing else "inactive", now if firing else None, ()
        )
        events += _claim_and_record(
            rule=rule,
            state=state,
            outcome=outcome,
            figure_ids={},
            now=now,
            replay=True,
            teams=teams,
            known_by=None,
            explanations=texts,
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
        if rule.metric in BUDGET_FORECAST_METRICS:
            events = _budget_forecast(rule, now=now, teams=teams)
            recorded.append(_Pending(rule, events))
            continue
        spec = rule_spec(rule)
        evaluated = getattr(rule, "evaluated", None)
        known_by = max(
            [rule.created_at, *([evaluated.at] if evaluated is not None else [])]
        )
        lookback = REPLAY_LOOKBACK if replay else LOOKBACK[rule.grain]
        found = list(rule_series(rule, start=now - lookback, end=now))
        states = states_of(rule, (series.name for series in found))
        for series in found:
            if _reopened(states[series.name], series):
                continue
            outcome = transitions(series.periods, spec)
            events = _claim_and_record(
                rule=rule,
                state=states[series.name],
                outcome=outcome,
                figure_ids=series.figure_ids,
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
