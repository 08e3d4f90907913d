"""Alertmanager and PagerDuty channels against loopback receivers, each
payload checked against the API's documented schema.

- Alertmanager: ``postableAlerts`` of api/v2/openapi.yaml (prometheus/
  alertmanager), written out below as JSON Schema: an array of alerts, each
  with ``labels`` (required, string to string), ``annotations``,
  ``startsAt``/``endsAt`` (date-time) and ``generatorURL`` (uri).
- PagerDuty: the Events API v2 "Send an Alert Event" reference
  (developer.pagerduty.com): ``routing_key`` (32 characters) and
  ``event_action`` always; ``dedup_key`` of at most 255 characters, required
  to resolve; a trigger's ``payload`` with ``summary`` (at most 1,024),
  ``source`` and ``severity`` (critical, error, warning, info).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from costapp.alerts.delivery import delivery_send
from costapp.alerts.forms import ChannelForm
from costapp.alerts.services import channel_upsert
from costapp.models import AlertRule
from tests.alerts.conftest import event_delivery
from tests.support.receiver import receiver

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

LABEL_SET = {"type": "object", "additionalProperties": {"type": "string"}}
POSTABLE_ALERTS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "startsAt": {"type": "string", "format": "date-time"},
            "endsAt": {"type": "string", "format": "date-time"},
            "annotations": LABEL_SET,
            "labels": LABEL_SET,
            "generatorURL": {"type": "string", "format": "uri"},
        },
        "required": ["labels"],
    },
}
PD_KEY = "R0UTINGKEYR0UTINGKEYR0UTINGKEY12"
PD_EVENT = {
    "type": "object",
    "properties": {
        "routing_key": {"type": "string", "minLength": 32, "maxLength": 32},
        "event_action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string", "maxLength": 255},
        "payload": {
            "type": "object",
            "properties": {
                "summary": {"type": "string", "maxLength": 1024},
                "source": {"type": "string", "minLength": 1},
                "severity": {"enum": ["critical", "error", "warning", "info"]},
                "timestamp": {"type": "string", "format": "date-time"},
                "component": {"type": "string"},
                "group": {"type": "string"},
                "class": {"type": "string"},
                "custom_details": {"type": "object"},
            },
            "required": ["summary", "source", "severity"],
        },
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"href": {"type": "string"}, "text": {"type": "string"}},
                "required": ["href"],
            },
        },
        "client": {"type": "string"},
        "client_url": {"type": "string"},
    },
    "required": ["routing_key", "event_action"],
    "allOf": [
        {
            "if": {"properties": {"event_action": {"const": "trigger"}}},
            "then": {"required": ["payload"]},
            "else": {"required": ["dedup_key"]},
        }
    ],
}
FORMATS = jsonschema.FormatChecker()


def valid(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.validate(instance, schema, format_checker=FORMATS)


def test_alertmanager_gets_one_alert_whose_labels_stay_put_until_resolved(
    loopback: None, rule: AlertRule
) -> None:
    with receiver([(200, b"", 0.0), (200, b"", 0.0)]) as rx:
        channel = channel_upsert(
            name="am", kind="alertmanager", config={"url": rx.url}
        ).channel
        firing = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        done = delivery_send(
            delivery_id=event_delivery(rule, channel, resolved=True).pk
        )
    assert firing is not None and firing.status == "sent"
    assert done is not None and done.status == "sent"
    first, last = (json.loads(r.body) for r in rx.received)
    # The channel's base URL (here rx.url, path /hook), then the API's path.
    assert {r.path for r in rx.received} == {"/hook/api/v2/alerts"}
    valid(first, POSTABLE_ALERTS)
    valid(last, POSTABLE_ALERTS)
    (alert,) = first
    assert alert["labels"] == {
        "alertname": "chat unit cost",
        "source": "costapp",
        "metric": "cost_per_1k_requests",
        "grain": "hour",
        "deployment": "chat",
    }
    assert last[0]["labels"] == alert["labels"]  # one alert to Alertmanager
    assert alert["annotations"]["description"] == "replicas 6 → 9 at unchanged traffic"
    assert alert["annotations"]["summary"].startswith("[costapp FIRING] chat:")
    assert alert["generatorURL"].startswith(("http://", "https://"))
    assert alert["generatorURL"].endswith("/economics/explain/17/")
    # Held while it fires (costapp does not resend every minute as
    # Prometheus does); ended by the resolution.
    assert alert["endsAt"] > alert["startsAt"]
    assert last[0]["endsAt"] < alert["endsAt"]


def test_pagerduty_triggers_then_resolves_the_same_dedup_key(
    loopback: None, rule: AlertRule
) -> None:
    accepted = (202, b'{"status":"success","message":"Event processed"}', 0.0)
    with receiver([accepted, accepted]) as rx:
        channel = channel_upsert(
            name="pd",
            kind="pagerduty",
            config={"url": rx.url + "/v2/enqueue", "routing_key": PD_KEY},
        ).channel
        firing = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        done = delivery_send(
            delivery_id=event_delivery(rule, channel, resolved=True).pk
        )
    assert (
        firing is not None and firing.status == "sent" and firing.response_code == 202
    )
    assert done is not None and done.status == "sent"
    trigger, resolve = (json.loads(r.body) for r in rx.received)
    valid(trigger, PD_EVENT)
    valid(resolve, PD_EVENT)
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert (
        trigger["dedup_key"]
        == resolve["dedup_key"]
        == ("costapp/chat unit cost/deployment/chat")
    )
    assert trigger["routing_key"] == PD_KEY
    assert trigger["payload"]["severity"] == "warning"
    assert trigger["links"][0]["href"].endswith("/economics/explain/17/")


def test_a_pagerduty_400_is_not_retried_and_a_429_is(
    loopback: None, rule: AlertRule
) -> None:
    refused = (400, b'{"status":"invalid event","message":"Event object is invalid"}')
    with receiver([(*refused, 0.0), (429, b"slow down", 0.0)]) as rx:
        channel = channel_upsert(
            name="pd",
            kind="pagerduty",
            config={"url": rx.url, "routing_key": PD_KEY},
        ).channel
        bad = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        busy = delivery_send(
            delivery_id=event_delivery(rule, channel, resolved=True).pk
        )
    assert bad is not None and bad.status == "failed" and not bad.retry
    assert "Event object is invalid" in bad.error
    assert busy is not None and busy.status == "pending" and busy.retry


def test_a_long_scope_keeps_its_dedup_key_within_pagerdutys_limit() -> None:
    from costapp.alerts.transports.pagerduty import dedup_key

    event = {"rule": "r" * 100, "scope": "deployment", "name": "n" * 200}
    key = dedup_key(event)
    assert len(key) == 255 and key != dedup_key({**event, "name": "n" * 199 + "m"})


@pytest.mark.parametrize(
    ("data", "field", "said"),
    [
        ({"kind": "pagerduty", "secret_routing_key": "short"}, "secret_routing_key",
         "shor…: a PagerDuty integration key"),
        ({"kind": "pagerduty", "secret_routing_key": PD_KEY,
          "secret_url": "http://169.254.169.254/v2/enqueue"}, "secret_url", "link-local"),
        ({"kind": "alertmanager", "secret_url": ""}, "secret_url", "an http(s) URL"),
    ],
)  # fmt: skip
def test_the_channel_form_refuses_what_these_apis_cannot_take(
    data: dict[str, str], field: str, said: str
) -> None:
    form = ChannelForm({"name": "c", **data})
    assert not form.is_valid()
    assert said in " ".join(form.errors[field])


def test_the_channel_form_fills_in_pagerdutys_events_endpoint() -> None:
    form = ChannelForm({"name": "c", "kind": "pagerduty", "secret_routing_key": PD_KEY})
    assert form.is_valid(), form.errors
    assert form.cleaned_data["config"] == {
        "url": "https://events.pagerduty.com/v2/enqueue",
        "routing_key": PD_KEY,
    }
