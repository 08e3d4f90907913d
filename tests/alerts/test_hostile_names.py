"""Names stored before the name rule (issue 28), and every other exception a
transport can raise: an attempt always ends "sent" or "failed" with its text,
never "sending" (re-queued by the reaper forever); an email never carries a
header of the user's making; "send test" never answers 500; Slack shows a
name as typed, never a mention or a link."""

from __future__ import annotations

import json
import smtplib
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.mail import BadHeaderError
from django.test import Client
from django.utils import timezone

from costapp.alerts.delivery import deliveries_reap, delivery_send
from costapp.alerts.payload import notification
from costapp.alerts.secrets import config_encrypt
from costapp.alerts.services import channel_upsert
from costapp.alerts.transports.base import one_line
from costapp.alerts.transports.email import Email
from costapp.alerts.transports.slack import Slack
from costapp.models import AlertEvent, AlertRule, Channel, Delivery
from tests.alerts.conftest import NOW
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

HEADER = "a\r\nBcc: evil@example.com"
SLACK_BAIT = "<!channel> <https://evil.example|Re-authenticate>"


def _stored_channel(name: str, to: list[str], **fields: Any) -> Channel:
    """A channel row as one stored before the rules: nothing checked."""
    return Channel.objects.create(
        name=name,
        kind="email",
        config_encrypted=config_encrypt({"to": to}),
        target_masked=", ".join(to),
        **fields,
    )


def _delivery(channel: Channel, *, rule_name: str, scope_name: str) -> Delivery:
    rule = AlertRule.objects.create(
        name=rule_name, metric="daily_spend", grain="day", scope="team",
        scope_name=scope_name, condition="threshold", threshold=100.0,
    )  # fmt: skip
    event = AlertEvent.objects.create(
        rule=rule, scope_name=scope_name, kind="firing", data_time=NOW,
        value=420.0, baseline=None, reason="", explanation="spend & <b>doubled</b>",
        created_at=timezone.now(),
    )  # fmt: skip
    delivery = Delivery.objects.create(
        channel=channel, webhook_id=f"msg_{rule.pk}", created_at=timezone.now()
    )
    delivery.events.set([event])
    return delivery


def _lines(message: mail.EmailMessage) -> list[str]:
    return message.message().as_string().splitlines()


def test_one_line_writes_each_refused_character_as_its_escape() -> None:
    assert one_line(HEADER) == "a\\r\\nBcc: evil@example.com"
    assert one_line("gpu\u202etxt\u2028") == "gpu\\u202etxt\\u2028"
    assert one_line("équipe ✓") == "équipe ✓"


def test_names_with_line_breaks_reach_no_header_and_no_line_of_their_own() -> None:
    channel = _stored_channel(HEADER, ["oncall@example.com"])
    delivery = _delivery(channel, rule_name=HEADER, scope_name=f"team{HEADER}")
    outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.status == "sent"
    assert Delivery.objects.get(pk=delivery.pk).status == Delivery.SENT
    (message,) = mail.outbox
    assert message.recipients() == ["oncall@example.com"] and not message.bcc
    assert "\n" not in message.subject and "\r" not in message.subject
    assert "teama\\r\\nBcc: evil@example.com" in message.subject
    lines = _lines(message)
    assert not [line for line in lines if line.lower().startswith("bcc")]
    assert "  Rule:      a\\r\\nBcc: evil@example.com" in lines


def test_an_address_with_a_line_break_fails_the_delivery_and_is_not_retried() -> None:
    channel = _stored_channel("oncall", [f"ok@example.com{HEADER}"])
    delivery = _delivery(channel, rule_name="spend", scope_name="assistant")
    outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    row = Delivery.objects.get(pk=delivery.pk)
    assert row.status == Delivery.FAILED
    assert row.error == (
        "to='ok@example.coma\\r\\nBcc: evil@example.com': "
        "contains a line break (U+000D)"
    )
    assert not mail.outbox
    channel.refresh_from_db()
    assert channel.permanent_failures == 1 and "line break" in channel.last_error


@pytest.mark.parametrize(
    "raised",
    [
        BadHeaderError("Header values can't contain newlines (got 'a\\r\\nb')"),
        UnicodeEncodeError("idna", "bad\u2028host", 3, 4, "label empty or too long"),
        ValueError("Invalid address; address parts cannot contain newlines."),
        KeyError("to"),
    ],
    ids=["BadHeaderError", "UnicodeError", "ValueError", "a bug"],
)
def test_any_exception_of_a_transport_ends_the_attempt_failed_with_its_text(
    monkeypatch: pytest.MonkeyPatch, raised: Exception
) -> None:
    def notify(self: Email, **kwargs: Any) -> None:
        raise raised

    monkeypatch.setattr(Email, "notify", notify)
    channel = _stored_channel("oncall", ["oncall@example.com"])
    delivery = _delivery(channel, rule_name="spend", scope_name="assistant")
    outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.status == "failed" and not outcome.retry
    row = Delivery.objects.get(pk=delivery.pk)
    assert row.status == Delivery.FAILED and row.attempts == 1
    assert row.error.startswith(type(raised).__name__ + ": ")
    assert "\n" not in row.error and "\r" not in row.error
    # Nothing left "sending": the reaper has nothing to queue again.
    later = timezone.now() + timedelta(days=1)
    assert delivery.pk not in deliveries_reap(now=later)


def test_an_smtp_error_is_still_the_transport_s_own_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def send(self: Any, fail_silently: bool = False) -> int:
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr(mail.EmailMultiAlternatives, "send", send)
    channel = _stored_channel("oncall", ["oncall@example.com"])
    delivery = _delivery(channel, rule_name="spend", scope_name="assistant")
    outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.retry and outcome.status == "pending"


@pytest.mark.django_db(transaction=True)  # on_commit runs as in a real request
def test_send_test_on_such_a_channel_answers_and_records_the_failure() -> None:
    admin = user_in("admin-send-test", "admin")
    admin.email = "admin@example.com"
    admin.save()
    # The third permanent failure in a day disables the channel and tells the
    # admins, naming it: once an on_commit callback that raised (a 500).
    channel = _stored_channel(
        HEADER,
        [f"ok@example.com{HEADER}"],
        permanent_failures=2,
        first_failure_at=timezone.now() - timedelta(hours=25),
    )
    client = Client(raise_request_exception=False)
    client.force_login(admin)
    response = client.post(f"/alerts/channels/{channel.pk}/", {"action": "test"})
    assert response.status_code in {200, 302}
    test = Delivery.objects.get(channel=channel, is_test=True)
    assert test.status == Delivery.FAILED and "line break" in test.error
    channel.refresh_from_db()
    assert channel.disabled_at is not None
    (told,) = mail.outbox
    assert told.subject == (
        "[costapp] alert channel a\\r\\nBcc: evil@example.com disabled"
    )
    assert not [line for line in _lines(told) if line.lower().startswith("bcc")]


def test_slack_shows_a_rule_name_as_typed_never_a_mention_or_a_link() -> None:
    channel = channel_upsert(
        name="slack", kind="slack",
        config={"url": "https://hooks.slack.com/services/T0/B0/x"},
    ).channel  # fmt: skip
    delivery = _delivery(channel, rule_name=SLACK_BAIT, scope_name="<!here>\r\nx")
    body = notification(delivery=delivery)
    payload = json.loads(Slack(config={"url": "unused"}).payload(body))
    mrkdwn = [payload["text"]] + [
        text["text"]
        for block in payload["blocks"]
        for text in [block.get("text") or {}, *block.get("fields", [])]
        if text.get("type") == "mrkdwn"
    ]
    rule_field = next(t for t in mrkdwn if t.startswith("*Rule*"))
    assert rule_field == (
        "*Rule*\n&lt;!channel&gt; &lt;https://evil.example|Re-authenticate&gt;"
    )
    assert "&lt;!here&gt;\\r\\nx" in payload["text"]
    assert "spend &amp; &lt;b&gt;doubled&lt;/b&gt;" in mrkdwn
    for text in mrkdwn:
        assert "<!" not in text and "<https://evil" not in text, text
