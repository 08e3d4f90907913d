from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
import time_machine

from costapp.alerts.delivery import delivery_send
from costapp.alerts.secrets import config_encrypt
from costapp.alerts.tasks import BACKOFF_CAP_S, backoff_s, delivery_send_task
from costapp.models import AlertRule, Channel, Delivery
from tests.alerts.conftest import NOW, event_delivery
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db


def _slack(url: str) -> Channel:
    return Channel.objects.create(
        name="slack", kind="slack", config_encrypted=config_encrypt({"url": url})
    )


def _fresh(rule: AlertRule, channel: Channel, n: int) -> Delivery:
    d = event_delivery(rule, channel)
    Delivery.objects.filter(pk=d.pk).update(webhook_id=f"msg_{n}")
    return Delivery.objects.get(pk=d.pk)


def test_permanent_failures_disable_after_three_events_over_at_least_24_hours(
    loopback: None, rule: AlertRule
) -> None:
    with receiver([(404, b"no_service", 0.0)]) as rx:
        channel = _slack(rx.url)
        with time_machine.travel(NOW, tick=False) as clock:
            for n in range(3):
                delivery_send(delivery_id=_fresh(rule, channel, n).pk)
                clock.shift(timedelta(hours=1))
            channel.refresh_from_db()
            assert channel.permanent_failures == 3 and channel.disabled_at is None
            clock.shift(timedelta(hours=22))
            delivery_send(delivery_id=_fresh(rule, channel, 9).pk)
    channel.refresh_from_db()
    assert channel.disabled_at is not None
    assert "permanent failures" in channel.disabled_reason


def test_a_slack_400_fails_the_delivery_without_counting_toward_disabling(
    loopback: None, rule: AlertRule
) -> None:
    with receiver([(400, b"invalid_payload", 0.0)]) as rx:
        channel = _slack(rx.url)
        outcome = delivery_send(delivery_id=_fresh(rule, channel, 1).pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    channel.refresh_from_db()
    assert channel.permanent_failures == 0 and channel.disabled_at is None


def test_a_3xx_is_a_failure_and_is_not_retried(loopback: None, rule: AlertRule) -> None:
    with receiver([(301, b"", 0.0)], headers={"Location": "http://10.0.0.1/"}) as rx:
        channel = _slack(rx.url)
        outcome = delivery_send(delivery_id=_fresh(rule, channel, 1).pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    assert "redirects are not followed" in outcome.error


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    rng = random.Random(4)
    waits = [backoff_s(n, rng=rng) for n in range(10)]
    for n, wait in enumerate(waits):
        full = min(BACKOFF_CAP_S, 30 * 2**n)
        assert full * 0.5 <= wait <= full
    assert max(waits) <= BACKOFF_CAP_S


def test_the_task_retries_with_the_receivers_retry_after(
    loopback: None, rule: AlertRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_retry(*args: Any, **kwargs: Any) -> Exception:
        seen.update(kwargs)
        return RuntimeError("retry")

    monkeypatch.setattr(delivery_send_task, "retry", fake_retry)
    with receiver([(503, b"", 0.0)], headers={"Retry-After": "7"}) as rx:
        channel = _slack(rx.url)
        pk = _fresh(rule, channel, 1).pk
        # As a worker runs it (not eagerly): retries are the task's job.
        delivery_send_task.push_request(retries=0, is_eager=False)
        try:
            with pytest.raises(RuntimeError, match="retry"):
                delivery_send_task.run(pk)
        finally:
            delivery_send_task.pop_request()
    assert seen["countdown"] == 7.0
    assert Delivery.objects.get(pk=pk).status == "pending"
