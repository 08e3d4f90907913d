"""PagerDuty Events API v2 (``POST /v2/enqueue``): one event per alert.

The ``dedup_key`` is the rule and its scope (``costapp/<rule>/<scope>/<name>``,
at most 255 characters), so a repeat updates the open PagerDuty alert
instead of opening another and a resolution closes it. PagerDuty takes one
event per request: a notification of several alerts is several requests, and
a retry after a partial failure sends them all again, which the dedup key
makes harmless. Answers (developer.pagerduty.com, "Send an Alert Event"): 202
accepted; 400 an event PagerDuty refuses (our bug or a bad key: not retried);
429 and 5xx retried.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from costapp.alerts import outbound
from costapp.alerts.payload import headline, value_text
from costapp.alerts.transports.base import (
    HttpTransport,
    TransportError,
    body_one_line,
)
from costapp.models import Delivery

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_MAX = 1024
DEDUP_MAX = 255


def dedup_key(event: dict[str, Any]) -> str:
    key = f"costapp/{event['rule']}/{event['scope']}/{event['name']}"
    if len(key) <= DEDUP_MAX:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return key[: DEDUP_MAX - 17] + "~" + digest


def severity(event: dict[str, Any]) -> str:
    """Staleness means figures cannot be trusted at all; a cost move is a
    warning for the on-call engineer to look at, not an outage."""
    return "error" if event["metric"] in ("staleness", "bill_staleness") else "warning"


def events(body: dict[str, Any], *, routing_key: str) -> list[dict[str, Any]]:
    if not body["events"]:  # a test: a trigger resolved at once would page
        return [
            {
                "routing_key": routing_key,
                "event_action": "resolve",
                "dedup_key": f"costapp/test/{body['channel']}"[:DEDUP_MAX],
            }
        ]
    out = []
    for event in body_one_line(body)["events"]:
        key = dedup_key(event)
        if event["kind"] == "resolved":
            out.append(
                {
                    "routing_key": routing_key,
                    "event_action": "resolve",
                    "dedup_key": key,
                }
            )
            continue
        details = {
            "rule": event["rule"],
            "metric": event["metric"],
            "unit": event["unit"],
            "value": value_text(event["value"], event["metric"]),
            "baseline": value_text(event["baseline"], event["metric"]),
            "data_time": event["data_time"],
            "reason": event["reason"],
            "explanation": event["explanation"],
        }
        trigger: dict[str, Any] = {
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": key,
            "client": "costapp",
            "payload": {
                "summary": headline(event)[:SUMMARY_MAX],
                "source": f"costapp {event['scope']} {event['name']}",
                "severity": severity(event),
                "timestamp": event["data_time"],
                "component": event["name"],
                "group": event["scope"],
                "class": event["metric"],
                "custom_details": {k: v for k, v in details.items() if v},
            },
        }
        if body["site"]:
            trigger["client_url"] = body["site"]
        if event["explanation_url"]:
            trigger["links"] = [
                {"href": event["explanation_url"], "text": "Explanation in costapp"}
            ]
        out.append(trigger)
    return out


class PagerDuty(HttpTransport):
    def url(self) -> str:
        return str(self.config.get("url") or EVENTS_URL)

    def notify(self, *, delivery: Delivery, body: dict[str, Any]) -> int | None:
        status = None
        for event in events(body, routing_key=str(self.config["routing_key"])):
            status = self.send(delivery=delivery, data=json.dumps(event).encode())
        return status

    def raise_for_response(self, response: outbound.Response) -> None:
        if response.status == 400:
            answer = response.body.decode("utf-8", "replace").strip()[:200]
            raise TransportError(
                f"PagerDuty refused the event: {answer}", status=400, retry=False
            )
        super().raise_for_response(response)
