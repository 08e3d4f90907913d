"""Writes of alerts: rules, channels, silences, secrets, the test send.
Services return rows and never queue (LAYOUT move 2)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from costapp.alerts.delivery import SendOutcome, delivery_send
from costapp.alerts.secrets import (
    config_decrypt,
    config_encrypt,
    mask,
    token_rotate,
    url_mask,
    webhook_secret_create,
)
from costapp.alerts.validation import channel_problems
from costapp.models import AlertRule, Channel, Delivery, Silence
from costapp.validation import InvalidInput


def target_masked(kind: str, config: dict[str, Any]) -> str:
    if kind == "email":
        return ", ".join(config.get("to", []))
    if kind == "slack":
        return url_mask(str(config.get("url", "")))
    return str(config.get("url", ""))


@dataclass(frozen=True)
class ChannelCreated:
    channel: Channel
    secret: str | None  # a new webhook secret, shown once


@transaction.atomic
def channel_upsert(
    *, name: str, kind: str, config: dict[str, Any], origin: str = "ui"
) -> ChannelCreated:
    """Create or update a channel; a webhook without a secret gets a new one
    (returned once, never shown again)."""
    problems = channel_problems(kind, config)
    if problems:
        field, message = problems[0]
        refused = InvalidInput(field, config.get(field), message)
        refused.args = (f"{field}={message}",)  # the message quotes the value
        raise refused
    config = dict(config)
    created_secret = None
    existing = Channel.objects.filter(name=name).first()
    if kind == "webhook" and not config.get("secret"):
        old = config_decrypt(existing.config_encrypted) if existing else {}
        if old.get("secret"):
            config["secret"] = old["secret"]
        else:
            created_secret = config["secret"] = webhook_secret_create()
    channel, _ = Channel.objects.update_or_create(
        name=name,
        defaults={
            "kind": kind,
            "config_encrypted": config_encrypt(config),
            "target_masked": target_masked(kind, config),
            "origin": origin,
        },
    )
    return ChannelCreated(channel, created_secret)


def channel_secret_create(*, channel: Channel) -> str:
    """A new webhook secret; the old one still signs (both signatures are
    sent) until ``channel_secret_retire``."""
    config = config_decrypt(channel.config_encrypted)
    secret = webhook_secret_create()
    config["previous_secret"] = config.get("secret", "")
    config["secret"] = secret
    channel.config_encrypted = config_encrypt(config)
    channel.save(update_fields=["config_encrypted"])
    return secret


def channel_secret_retire(*, channel: Channel) -> None:
    config = config_decrypt(channel.config_encrypted)
    config.pop("previous_secret", None)
    channel.config_encrypted = config_encrypt(config)
    channel.save(update_fields=["config_encrypted"])


def channel_enable(*, channel: Channel) -> None:
    Channel.objects.filter(pk=channel.pk).update(
        disabled_at=None,
        disabled_reason="",
        permanent_failures=0,
        first_failure_at=None,
    )


def channel_secret_masked(channel: Channel) -> str:
    secret = config_decrypt(channel.config_encrypted).get("secret")
    return mask(secret) if secret else ""


def channel_test_send(*, channel: Channel, now: datetime | None = None) -> SendOutcome:
    """One attempt, no retry (healthchecks' retry=False for tests); the
    outcome is also in the notification log."""
    delivery = Delivery.objects.create(
        channel=channel,
        webhook_id=f"msg_{uuid.uuid4().hex}",
        is_test=True,
        created_at=now or timezone.now(),
    )
    outcome = delivery_send(delivery_id=delivery.pk, final=True)
    assert outcome is not None  # a fresh pending row is always claimable
    return outcome


def secrets_rotate() -> int:
    """Re-encrypt every channel with the first COSTAPP_SECRET_KEYS key."""
    count = 0
    with transaction.atomic():
        for channel in Channel.objects.select_for_update():
            channel.config_encrypted = token_rotate(channel.config_encrypted)
            channel.save(update_fields=["config_encrypted"])
            count += 1
    return count


def silence_create(
    *,
    scope: str,
    name: str,
    starts_at: datetime,
    ends_at: datetime,
    comment: str,
    by: str,
) -> Silence:
    if ends_at <= starts_at:
        raise InvalidInput("ends_at", ends_at, "must be after the start")
    return Silence.objects.create(
        scope=scope,
        name=name,
        starts_at=starts_at,
        ends_at=ends_at,
        comment=comment,
        created_by=by,
    )


def rule_channels_set(*, rule: AlertRule, channels: list[Channel]) -> None:
    rule.channels.set(channels)


@transaction.atomic
def alert_rule_save(*, rule: AlertRule, channels: list[Channel]) -> AlertRule:
    if AlertRule.objects.filter(name=rule.name).exclude(pk=rule.pk).exists():
        raise InvalidInput("name", rule.name, "a rule of that name exists")
    rule.save()
    rule.channels.set(channels)
    return rule


def alert_rule_delete(*, rule: AlertRule) -> None:
    rule.delete()


def silence_end(*, silence_id: int, now: datetime) -> int:
    return Silence.objects.filter(pk=silence_id, ends_at__gt=now).update(ends_at=now)


def channel_delete(*, channel: Channel) -> None:
    channel.delete()
