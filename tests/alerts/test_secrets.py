from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command

from costapp.alerts.payload import notification
from costapp.alerts.secrets import (
    SecretError,
    config_decrypt,
    mask,
    scrub,
    url_mask,
    webhook_secret_create,
    webhook_secret_key,
)
from costapp.alerts.services import channel_upsert
from costapp.models import AlertRule, Channel
from tests.alerts.conftest import event_delivery

ROOT = Path(__file__).resolve().parents[2]


def test_a_webhook_secret_is_32_random_bytes_in_the_whsec_spelling() -> None:
    a, b = webhook_secret_create(), webhook_secret_create()
    assert a.startswith("whsec_") and a != b
    assert len(webhook_secret_key(a)) == 32


def test_masks_and_scrubs_never_show_the_credential() -> None:
    url = "https://hooks.slack.com/services/T1/B2/secretpart"
    assert url_mask(url) == "https://hooks.slack.com/…"
    assert "secretpart" not in scrub(f"failed posting to {url}")
    assert "abc" not in scrub("token abc here", secrets=["abc"])
    assert mask("whsec_0123456789abcdef").endswith("cdef")
    assert "456789ab" not in mask("whsec_0123456789abcdef")


@pytest.mark.django_db
def test_rotation_re_encrypts_with_the_first_key_and_the_old_key_can_go(
    settings: Any,
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.COSTAPP_SECRET_KEYS = [old]
    channel = channel_upsert(
        name="s", kind="slack", config={"url": "https://hooks.slack.com/services/T/B/x"}
    ).channel
    stored = Channel.objects.get(pk=channel.pk).config_encrypted
    assert "hooks.slack.com" not in stored
    settings.COSTAPP_SECRET_KEYS = [new, old]
    call_command("alerts_secrets_rotate", stdout=open("/dev/null", "w"))
    settings.COSTAPP_SECRET_KEYS = [new]
    row = Channel.objects.get(pk=channel.pk)
    assert row.config_encrypted != stored
    assert config_decrypt(row.config_encrypted)["url"].endswith("/T/B/x")
    settings.COSTAPP_SECRET_KEYS = [old]
    with pytest.raises(SecretError, match="alerts_secrets_rotate"):
        config_decrypt(row.config_encrypted)


@pytest.mark.django_db
def test_the_webhook_body_matches_the_documented_schema(rule: AlertRule) -> None:
    schema = json.loads((ROOT / "docs" / "alerts.schema.json").read_text())
    channel = channel_upsert(
        name="h", kind="webhook", config={"url": "https://example.com/h"}
    ).channel
    body = notification(delivery=event_delivery(rule, channel))
    jsonschema.validate(body, schema)
    broken = {**body, "events": [{**body["events"][0], "kind": "maybe"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
