"""Writes of alerts: rules, channels, silences, secrets, the test send.
Services return rows and never queue (LAYOUT move 2)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.alerts import secrets
from costapp.alerts.delivery import SendOutcome, delivery_send
from costapp.alerts.secrets import (
    SecretError,
    config_decrypt,
    config_encrypt,
    mask,
    target_mask,
    webhook_secret_create,
)
from costapp.alerts.validation import channel_problems
from costapp.models import AlertRule, AlertState, Channel, Delivery, Silence

TARGET_SHOWN_MAX = 300  # Channel.target_masked


def target_masked(kind: str, config: dict[str, Any]) -> str:
    """What every page shows of a channel's target, admins' included: a URL
    masked (it is the credential, or carries it), email addresses in full (an
    address sends nothing by itself)."""
    if kind == "email":
        shown = ", ".join(config.get("to", []))
    else:
        shown = target_mask(str(config.get("url", "")))
    if len(shown) > TARGET_SHOWN_MAX:
        shown = shown[: TARGET_SHOWN_MAX - 1] + "…"
    return shown


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
    _refused(kind, config)
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


def _refused(kind: str, config: dict[str, Any]) -> None:
    problems = channel_problems(kind, config)
    if problems:
        name, message = problems[0]
        refused = InvalidInput(name, config.get(name), message)
        refused.args = (f"{name}={message}",)  # the message quotes the value
        raise refused


@transaction.atomic
def channel_update(
    *, channel: Channel, name: str, kind: str, config: dict[str, Any] | None
) -> ChannelCreated:
    """Rename or retarget a channel. ``config`` None keeps the stored settings
    (the form's blank target: it is never shown, so never retyped by mistake).
    A new webhook URL keeps the signing secrets; where the stored settings no
    longer decrypt, a webhook gets a new secret (returned once)."""
    if Channel.objects.filter(name=name).exclude(pk=channel.pk).exists():
        raise InvalidInput("name", name, "a channel of that name exists")
    if config is None and kind != channel.kind:
        raise InvalidInput("kind", kind, "a new kind needs its target")
    if config is not None:
        _refused(kind, config)
    channel.name = name
    if config is None:
        channel.save(update_fields=["name"])
        return ChannelCreated(channel, None)
    config = dict(config)
    created_secret = None
    if kind == "webhook":
        try:
            old = config_decrypt(channel.config_encrypted)
        except SecretError:
            old = {}
        for key in ("secret", "previous_secret"):
            if old.get(key) and channel.kind == "webhook":
                config[key] = old[key]
        if not config.get("secret"):
            created_secret = config["secret"] = webhook_secret_create()
    channel.kind = kind
    channel.config_encrypted = config_encrypt(config)
    channel.target_masked = target_masked(kind, config)
    channel.save(update_fields=["name", "kind", "config_encrypted", "target_masked"])
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


@dataclass
class SecretsRotated:
    to: str  # the key everything is now under (its setting, not its value)
    moved: Counter[str] = field(default_factory=Counter)  # from key -> channels
    current: int = 0  # already under ``to``
    # Were under the published development key: readable by anyone with a copy.
    public: list[str] = field(default_factory=list)
    # No key decrypts: channel name, when its settings were encrypted.
    unreadable: list[tuple[str, datetime | None]] = field(default_factory=list)


def secrets_rotate() -> SecretsRotated:
    """Re-encrypt every channel with the first key, whichever key decrypts it
    (any of COSTAPP_SECRET_KEYS, one derived from SECRET_KEY, its fallbacks or
    the development key); what none decrypts is reported and left as it is."""
    candidates = secrets.keys(rotation=True)
    first = candidates[0]
    report = SecretsRotated(to=first.label)
    with transaction.atomic():
        for channel in Channel.objects.select_for_update().order_by("name"):
            found = secrets.token_key(channel.config_encrypted, candidates)
            if found is None:
                made = secrets.token_made_at(channel.config_encrypted)
                report.unreadable.append((channel.name, made))
                continue
            key, data = found
            if key is first:
                report.current += 1
                continue
            channel.config_encrypted = first.fernet.encrypt(data).decode()
            channel.save(update_fields=["config_encrypted"])
            report.moved[key.label] += 1
            if key.public:
                report.public.append(channel.name)
    # In the keys' order, newest first, as the report lists them.
    order = [k.label for k in candidates]
    report.moved = Counter(
        dict(sorted(report.moved.items(), key=lambda m: order.index(m[0])))
    )
    return report


def alert_acknowledge(
    *, rule: AlertRule, scope_name: str, by: str, now: datetime
) -> bool:
    """Acknowledge an active alert: its repeats are recorded, not sent, until
    it resolves. False when it is not active (nothing to acknowledge)."""
    return bool(
        AlertState.objects.filter(
            rule=rule, scope_name=scope_name, state__in=AlertState.ACTIVE
        ).update(acknowledged_by=by, acknowledged_at=now)
    )


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
