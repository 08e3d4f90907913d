from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.services import channel_upsert
from costapp.models import (
    AlertEvent,
    AlertRule,
    Channel,
    Delivery,
    IngestRun,
    Silence,
    UnitCostFigure,
)
from tests.alerts.conftest import NOW

pytestmark = pytest.mark.django_db


def _figures(name: str, end: datetime, pattern: str) -> None:
    """One hourly figure per character ending at ``end``: '1' is 1.5 x the
    baseline, '0' at it."""
    start = end - timedelta(hours=len(pattern))
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name=name,
            grain="hour",
            period_start=start + timedelta(hours=i),
            clock="provisional",
            cost_per_1k_requests=0.45 if c == "1" else 0.30,
            baseline=0.30,
            lower=0.25,
            upper=0.35,
            requests=5000,
            flag="anomaly" if c == "1" else "",
            cause="replicas 6 → 9 at unchanged traffic" if c == "1" else "",
            computed_at=end,
        )
        for i, c in enumerate(pattern)
    )


@pytest.fixture
def channel() -> Channel:
    return channel_upsert(name="mail", kind="email", config={"to": ["a@b.co"]}).channel


@pytest.fixture
def fleet_rule(channel: Channel) -> AlertRule:
    rule = AlertRule.objects.create(
        name="unit cost",
        metric="cost_per_1k_requests",
        grain="hour",
        scope="deployment",
        condition="ratio",
        ratio=1.2,
        for_periods=3,
    )
    rule.channels.set([channel])
    return rule


def test_a_90_day_backfill_sends_nothing_and_records_why(
    fleet_rule: AlertRule,
) -> None:
    # An incident ten days ago, quiet since.
    _figures("chat", NOW, "0" * 24 + "1" * 6 + "0" * 240)
    assert alert_rules_evaluate(now=NOW) == []
    kinds = list(
        AlertEvent.objects.order_by("data_time").values_list("kind", "not_sent")
    )
    assert kinds == [("firing", "historical"), ("resolved", "historical")]
    (row,) = Delivery.objects.all()
    assert (row.status, row.reason) == ("not_sent", "historical")


def test_a_live_incident_sends_once_with_the_explanation(fleet_rule: AlertRule) -> None:
    _figures("chat", NOW, "0" * 48 + "111")
    (pk,) = alert_rules_evaluate(now=NOW)
    delivery = Delivery.objects.get(pk=pk)
    (event,) = delivery.events.all()
    assert (event.kind, event.scope_name, event.not_sent) == ("firing", "chat", "")
    assert event.explanation == "replicas 6 → 9 at unchanged traffic"
    assert event.figure_id is not None
    assert alert_rules_evaluate(now=NOW + timedelta(minutes=15)) == []


def test_replay_sends_history(fleet_rule: AlertRule) -> None:
    _figures("chat", NOW, "0" * 24 + "1" * 6 + "0" * 240)
    (pk,) = alert_rules_evaluate(now=NOW, replay=True)
    assert Delivery.objects.get(pk=pk).events.count() == 2


def test_transitions_of_one_evaluation_are_grouped_per_channel(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 10 + "111")
    _figures("embed", NOW, "0" * 10 + "111")
    (pk,) = alert_rules_evaluate(now=NOW)
    names = sorted(
        Delivery.objects.get(pk=pk).events.values_list("scope_name", flat=True)
    )
    assert names == ["chat", "embed"]


def test_a_restatement_that_removes_the_breach_resolves_with_reason_restated(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 10 + "111")
    alert_rules_evaluate(now=NOW)
    UnitCostFigure.objects.update(cost_per_1k_requests=0.30, flag="", cause="")
    (pk,) = alert_rules_evaluate(now=NOW + timedelta(hours=1))
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.kind, event.reason) == ("resolved", "restated")


def test_a_silenced_deployment_is_recorded_but_not_sent(
    fleet_rule: AlertRule,
) -> None:
    Silence.objects.create(
        scope="deployment",
        name="chat",
        starts_at=NOW - timedelta(hours=1),
        ends_at=NOW + timedelta(hours=1),
    )
    _figures("chat", NOW, "0" * 10 + "111")
    assert alert_rules_evaluate(now=NOW) == []
    assert AlertEvent.objects.get().not_sent == "silenced"


def test_the_hourly_cap_holds_further_notifications(
    fleet_rule: AlertRule, channel: Channel
) -> None:
    channel.hourly_cap = 1
    channel.save()
    _figures("chat", NOW, "0" * 10 + "111")
    assert len(alert_rules_evaluate(now=NOW)) == 1
    _figures("embed", NOW + timedelta(hours=1), "0" * 10 + "111")
    assert alert_rules_evaluate(now=NOW + timedelta(minutes=30)) == []
    assert Delivery.objects.filter(reason="hourly cap").count() == 1


def test_a_stopped_ingest_fires_one_staleness_alert_per_source(
    channel: Channel,
) -> None:
    rule = AlertRule.objects.create(
        name="stale",
        metric="staleness",
        grain="hour",
        condition="threshold",
        threshold=3,
    )
    rule.channels.set([channel])
    for source, target, end in (
        ("prometheus", "chat,embed", NOW - timedelta(hours=8)),
        ("prometheus", "rag", NOW - timedelta(hours=7)),
        ("cost_explorer", "111111111111", NOW - timedelta(hours=1)),
    ):
        IngestRun.objects.create(
            source=source,
            target=target,
            window_start=end - timedelta(hours=1),
            window_end=end,
            status=IngestRun.SUCCEEDED,
        )
    (pk,) = alert_rules_evaluate(now=NOW)
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.scope_name, event.kind, event.reason) == (
        "prometheus",
        "firing",
        "stale",
    )
    assert alert_rules_evaluate(now=NOW + timedelta(hours=1)) == []
    IngestRun.objects.create(
        source="prometheus",
        window_start=NOW,
        window_end=NOW + timedelta(hours=2),
        status=IngestRun.SUCCEEDED,
    )
    (pk,) = alert_rules_evaluate(now=NOW + timedelta(hours=2))
    assert Delivery.objects.get(pk=pk).events.get().kind == "resolved"


def test_a_per_1m_token_ratio_rule_reads_the_stored_token_baseline(
    channel: Channel,
) -> None:
    rule = AlertRule.objects.create(
        name="tokens",
        metric="cost_per_1m_tokens",
        grain="hour",
        condition="ratio",
        ratio=1.2,
        for_periods=2,
    )
    rule.channels.set([channel])
    _figures("chat", NOW, "0" * 5 + "11")
    UnitCostFigure.objects.update(cost_per_1m_tokens=2.0, baseline_per_1m_tokens=1.0)
    UnitCostFigure.objects.filter(period_start__lt=NOW - timedelta(hours=2)).update(
        cost_per_1m_tokens=1.0
    )
    (pk,) = alert_rules_evaluate(now=NOW)
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.kind, event.value, event.baseline) == ("firing", 2.0, 1.0)


def test_the_recompute_after_an_ingest_runs_the_evaluation(
    fleet_rule: AlertRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time_machine

    from costapp.economics import tasks as economics_tasks

    class Result:
        rows_written = 0

    monkeypatch.setattr(economics_tasks, "run_changes", lambda run: (None, None))
    monkeypatch.setattr(
        economics_tasks, "unit_costs_recompute", lambda **kwargs: Result()
    )
    _figures("chat", NOW, "0" * 10 + "111")
    run = IngestRun.objects.create(
        source="demo", window_start=NOW, window_end=NOW, status=IngestRun.SUCCEEDED
    )
    with time_machine.travel(NOW, tick=False):
        economics_tasks.unit_costs_recompute_task(run.pk)
    assert AlertEvent.objects.get().kind == "firing"


def test_a_backfill_of_90_days_of_daily_figures_sends_nothing(channel: Channel) -> None:
    rule = AlertRule.objects.create(
        name="daily", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    rule.channels.set([channel])
    midnight = NOW.replace(hour=0)
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name=name,
            grain="day",
            period_start=midnight - timedelta(days=90 - i),
            clock="final",
            # an incident every fortnight, none in the last week
            cost_per_1k_requests=0.6 if i % 14 == 3 and i < 80 else 0.3,
            baseline=0.3,
            requests=10_000,
            computed_at=NOW,
        )
        for name in ("chat", "embed")
        for i in range(90)
    )
    assert alert_rules_evaluate(now=NOW) == []
    events = AlertEvent.objects.all()
    assert events.count() == 2 * 2 * 6  # 6 incidents x fire + resolve x 2 series
    assert set(events.values_list("not_sent", flat=True)) == {"historical"}
    assert alert_rules_evaluate(now=NOW + timedelta(hours=1)) == []
