"""The demo ships a rule and a console email channel: its incident fires in
the backtest and in the notification log, with the explanation in the
message, and its holiday does not."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.selectors import alert_rule_backtest
from costapp.alerts.tasks import deliveries_queue
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.fleet.demo_setup import DEMO_FLEET, demo_fleet_load, demo_ingest
from costapp.fleet.services import rate_card_seed
from costapp.models import (
    AlertEvent,
    AlertRule,
    Channel,
    CostLine,
    Delivery,
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    IngestRun,
    Pool,
    RateCard,
    UnitCostFigure,
)
from costapp.sources.demo import DemoEvents

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 56
EVENTS = DemoEvents.for_end(END)
MODELS = (Delivery, AlertEvent, AlertRule, Channel, UnitCostFigure, CostLine,
          DeploymentHour, DeviceHour, HistogramHour, EngineDiscovery, IngestRun,
          Deployment, Pool, RateCard)  # fmt: skip


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        for model in MODELS:
            model.objects.all().delete()
        demo_fleet_load(end=END)
        alert_rules_load(path=DEMO_FLEET)
        rate_card_seed()
        demo_ingest(end=END, days=DAYS)
        unit_costs_recompute(now=END)
        yield
        for model in MODELS:
            model.objects.all().delete()


def test_the_demo_rule_fires_on_the_incident_and_not_on_the_holiday(demo: None) -> None:
    rule = AlertRule.objects.get(name="unit cost drift")
    result = alert_rule_backtest(rule=rule, now=END, days=DAYS)
    fired = [(i.name, i.fired_at.date()) for i in result.incidents]
    incident_days = {
        (
            EVENTS.incident_start
            + (EVENTS.incident_end - EVENTS.incident_start) * k / 4
        ).date()
        for k in range(5)
    }
    assert any(name == "chat" and day in incident_days for name, day in fired), (
        result.sentence
    )
    assert all(day != EVENTS.holiday for _name, day in fired), result.sentence
    assert "would have fired" in result.sentence and "chat" in result.sentence


def test_the_replay_puts_the_incident_in_the_log_with_its_explanation(
    demo: None,
    capsys: pytest.CaptureFixture[str],
    django_capture_on_commit_callbacks: object,
) -> None:
    ids = alert_rules_evaluate(now=END, replay=True)
    assert len(ids) == 1  # one notification for the console channel, grouped
    firing = AlertEvent.objects.filter(scope_name="chat", kind="firing").first()
    assert firing is not None and firing.explanation
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        deliveries_queue(ids)
    row = Delivery.objects.get(pk=ids[0])
    assert row.status == "sent", row.error
    printed = capsys.readouterr().out  # the console channel
    assert "Subject: [costapp FIRING] chat: cost per 1k requests" in printed
    assert firing.explanation.split()[0] in printed
    assert AlertEvent.objects.filter(data_time__date=EVENTS.holiday).count() == 0
    assert alert_rules_evaluate(now=END) == []
