from __future__ import annotations

from typing import Any

import pytest

from costapp.alerts.delivery import delivery_send
from costapp.alerts.services import channel_test_send, channel_upsert
from costapp.models import AlertRule, Channel
from tests.alerts.conftest import event_delivery
from tests.support.smtp import Mailbox, smtp_server

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


@pytest.fixture
def mailbox(settings: Any) -> Any:
    with smtp_server() as box:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = box.port
        settings.SITE_URL = "https://costapp.example.com"
        yield box


def _channel() -> Channel:
    return channel_upsert(
        name="oncall", kind="email", config={"to": ["oncall@example.com"]}
    ).channel


def test_the_email_says_deployment_metric_value_and_baseline_and_links_the_explanation(
    mailbox: Mailbox, rule: AlertRule
) -> None:
    outcome = delivery_send(delivery_id=event_delivery(rule, _channel()).pk)
    assert outcome is not None and outcome.status == "sent"
    (message,) = mailbox.messages
    assert message["Subject"] == (
        "[costapp FIRING] chat: cost per 1k requests $0.4200 (baseline $0.3000)"
    )
    assert message["To"] == "oncall@example.com"
    assert message["X-Costapp-Notification"] == "msg_abc123"
    parts = {
        p.get_content_type(): p.get_payload(decode=True).decode()
        for p in message.walk()
        if not p.is_multipart()
    }
    assert set(parts) == {"text/plain", "text/html"}
    link = "https://costapp.example.com/economics/explain/17/"
    for body in parts.values():
        assert link in body
        assert "replicas 6 → 9 at unchanged traffic" in body
    assert f'<a href="{link}">' in parts["text/html"]


def test_an_smtp_5xx_is_permanent_and_not_retried(
    mailbox: Mailbox, rule: AlertRule
) -> None:
    mailbox.refuse_with = "550 no such user"
    channel = _channel()
    outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    channel.refresh_from_db()
    assert channel.permanent_failures == 1 and channel.disabled_at is None


def test_an_smtp_4xx_is_retried(mailbox: Mailbox, rule: AlertRule) -> None:
    mailbox.refuse_with = "451 try later"
    outcome = delivery_send(delivery_id=event_delivery(rule, _channel()).pk)
    assert outcome is not None and outcome.retry and outcome.status == "pending"


def test_send_test_makes_one_attempt_and_reports_it(mailbox: Mailbox) -> None:
    outcome = channel_test_send(channel=_channel())
    assert outcome.status == "sent"
    (message,) = mailbox.messages
    assert message["Subject"] == "[costapp] test notification"
