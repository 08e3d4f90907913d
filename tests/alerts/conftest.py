from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from costapp.models import AlertEvent, AlertRule, Channel, Delivery

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def loopback(settings: object) -> Iterator[None]:
    """The test-only way to reach a receiver on 127.0.0.1."""
    settings.COSTAPP_OUTBOUND_TEST_LOOPBACK = True  # type: ignore[attr-defined]
    yield


@pytest.fixture
def rule(db: None) -> AlertRule:
    return AlertRule.objects.create(
        name="chat unit cost",
        metric="cost_per_1k_requests",
        grain="hour",
        scope="deployment",
        scope_name="chat",
        condition="ratio",
        ratio=1.2,
        for_periods=3,
    )


def event_delivery(
    rule: AlertRule, channel: Channel, *, resolved: bool = False
) -> Delivery:
    """One notification of chat's alert: firing on the incident's figure, or
    its resolution three hours later."""
    event = AlertEvent.objects.create(
        rule=rule,
        scope_name="chat",
        kind="resolved" if resolved else "firing",
        data_time=NOW + timedelta(hours=3) if resolved else NOW,
        value=0.31 if resolved else 0.42,
        baseline=0.30,
        explanation="" if resolved else "replicas 6 → 9 at unchanged traffic",
        figure_id=None if resolved else 17,
        created_at=timezone.now(),
    )
    delivery = Delivery.objects.create(
        channel=channel,
        webhook_id="msg_resolved" if resolved else "msg_abc123",
        created_at=timezone.now(),
    )
    delivery.events.set([event])
    return delivery
