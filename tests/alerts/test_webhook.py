from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
import standardwebhooks
import time_machine

from costapp.alerts.delivery import delivery_send
from costapp.alerts.services import channel_secret_create, channel_upsert
from costapp.models import AlertRule, Channel, Delivery
from tests.alerts.conftest import NOW, event_delivery
from tests.support.receiver import receiver

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def _webhook(url: str) -> tuple[Channel, str]:
    created = channel_upsert(name="hook", kind="webhook", config={"url": url})
    assert created.secret and created.secret.startswith("whsec_")
    return created.channel, created.secret


def test_the_receiver_verifies_the_signature_with_the_reference_package(
    loopback: None, rule: AlertRule
) -> None:
    with receiver() as rx:
        channel, secret = _webhook(rx.url)
        delivery = event_delivery(rule, channel)
        outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.status == "sent"
    assert outcome.response_code == 200
    (got,) = rx.received
    payload = standardwebhooks.Webhook(secret).verify(got.body, got.headers)
    assert payload["events"][0]["name"] == "chat"
    assert payload["events"][0]["explanation_url"].endswith("/economics/explain/17/")
    assert got.headers["webhook-id"] == "msg_abc123"


def test_500_500_200_gives_one_id_three_increasing_timestamps_and_valid_signatures(
    loopback: None, rule: AlertRule
) -> None:
    script = [(500, b"no", 0.0), (500, b"no", 0.0), (200, b"ok", 0.0)]
    with receiver(script) as rx, time_machine.travel(NOW, tick=False) as clock:
        channel, secret = _webhook(rx.url)
        delivery = event_delivery(rule, channel)
        outcomes = []
        for _ in range(3):
            outcomes.append(delivery_send(delivery_id=delivery.pk))
            clock.shift(timedelta(seconds=40))
        hook = standardwebhooks.Webhook(secret)
        for got in rx.received:
            # verified at its own arrival time: rewind to the attempt
            with time_machine.travel(int(got.headers["webhook-timestamp"]), tick=False):
                hook.verify(got.body, got.headers)
    assert [o.status for o in outcomes if o] == ["pending", "pending", "sent"]
    assert all(o and o.retry for o in outcomes[:2])
    assert {g.headers["webhook-id"] for g in rx.received} == {"msg_abc123"}
    stamps = [int(g.headers["webhook-timestamp"]) for g in rx.received]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (
        "sent",
        3,
        200,
    )


def test_a_captured_request_replayed_six_minutes_later_is_rejected(
    loopback: None, rule: AlertRule
) -> None:
    with receiver() as rx, time_machine.travel(NOW, tick=False) as clock:
        channel, secret = _webhook(rx.url)
        delivery_send(delivery_id=event_delivery(rule, channel).pk)
        (got,) = rx.received
        hook = standardwebhooks.Webhook(secret)
        hook.verify(got.body, got.headers)
        clock.shift(timedelta(minutes=6))
        with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
            hook.verify(got.body, got.headers)


def test_a_410_disables_the_channel_at_once(loopback: None, rule: AlertRule) -> None:
    with receiver([(410, b"gone", 0.0)]) as rx:
        channel, _ = _webhook(rx.url)
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    channel.refresh_from_db()
    assert channel.disabled_at is not None
    assert "410" in channel.disabled_reason


def test_a_receiver_that_never_answers_is_timed_out_and_left_for_a_retry(
    loopback: None, rule: AlertRule, settings: object
) -> None:
    settings.COSTAPP_WEBHOOK_TIMEOUT_S = 0.3  # type: ignore[attr-defined]
    with receiver([(200, b"late", 2.0)]) as rx:
        channel, _ = _webhook(rx.url)
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
    assert outcome is not None and outcome.retry and outcome.status == "pending"
    assert "timed out" in outcome.error
    assert len(rx.received) == 1


def test_a_404_is_not_retried_and_a_4xx_other_than_408_429_neither(
    loopback: None, rule: AlertRule
) -> None:
    with receiver([(400, b"bad", 0.0)]) as rx:
        channel, _ = _webhook(rx.url)
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry


def test_429_retry_after_is_honoured(loopback: None, rule: AlertRule) -> None:
    with receiver([(429, b"slow down", 0.0)], headers={"Retry-After": "42"}) as rx:
        channel, _ = _webhook(rx.url)
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
    assert outcome is not None and outcome.retry and outcome.retry_after == 42.0


def test_during_a_rotation_both_signatures_are_sent_and_each_verifies(
    loopback: None, rule: AlertRule
) -> None:
    with receiver() as rx:
        channel, old = _webhook(rx.url)
        new = channel_secret_create(channel=channel)
        delivery_send(delivery_id=event_delivery(rule, channel).pk)
    (got,) = rx.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        standardwebhooks.Webhook(secret).verify(got.body, got.headers)


def test_a_failing_slack_url_leaves_its_token_in_neither_the_row_nor_the_log(
    loopback: None, rule: AlertRule, caplog: pytest.LogCaptureFixture
) -> None:
    token = "T000/B000/XXXXsecretXXXX"
    with receiver([(403, b"invalid_token", 0.0)]) as rx:
        url = rx.url.replace("/hook", f"/services/{token}")
        channel = Channel.objects.create(name="s", kind="slack", config_encrypted="")
        from costapp.alerts.secrets import config_encrypt

        channel.config_encrypted = config_encrypt({"url": url})
        channel.save()
        with caplog.at_level(logging.DEBUG):
            outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        (got,) = rx.received
    assert outcome is not None and outcome.status == "failed"
    blocks = json.loads(got.body)["blocks"]
    assert blocks[0]["type"] == "header" and "chat" in blocks[0]["text"]["text"]
    channel.refresh_from_db()
    assert channel.permanent_failures == 1  # invalid_token counts toward disabling
    row = Delivery.objects.get(channel=channel)
    for text in (row.error, channel.last_error, caplog.text, channel.config_encrypted):
        assert token not in text
        assert "XXXXsecretXXXX" not in text


def test_disabling_emails_the_admins(
    loopback: None,
    rule: AlertRule,
    mailoutbox: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    from tests.support.users import user_in

    admin = user_in("boss", "admin")
    admin.email = "boss@example.com"
    admin.save()
    with receiver([(410, b"gone", 0.0)]) as rx:
        channel, _ = _webhook(rx.url)
        with django_capture_on_commit_callbacks(execute=True):
            delivery_send(delivery_id=event_delivery(rule, channel).pk)
    (message,) = mailoutbox
    assert message.to == ["boss@example.com"]
    assert "hook disabled" in message.subject and "410" in message.body
