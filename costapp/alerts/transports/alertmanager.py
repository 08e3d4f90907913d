"""Prometheus Alertmanager: ``POST /api/v2/alerts`` (api/v2/openapi.yaml,
``postableAlerts``), so a cost alert is routed, grouped, inhibited and
silenced with the rest of on-call's alerts.

Alertmanager identifies an alert by its label set: the labels are the rule,
the metric, the scope and its name, and never change between the firing,
repeat and resolved notifications of one alert. Everything else (what moved,
the value against its baseline, the explanation and its link) is annotations.

Alertmanager resolves an alert whose ``endsAt`` passes without a new post
(clients such as Prometheus resend every evaluation; costapp posts on
firing, on each repeat and on resolution). A firing post therefore holds the
alert for ``HOLD`` past the repeat that refreshes it; a resolved one sets
``endsAt`` to now. A rule that does not notify on resolution leaves the
alert to lapse ``HOLD`` after its last repeat.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from costapp.alerts.payload import headline, value_text
from costapp.alerts.transports.base import HttpTransport, body_one_line

API_PATH = "/api/v2/alerts"
# Longer than the longest repeat interval a rule may have (validation's
# repeat_minutes bound) so a still-firing alert never lapses between repeats.
HOLD = timedelta(days=8)


def alerts_url(url: str) -> str:
    """The channel's Alertmanager base URL, or its alerts endpoint as given."""
    url = url.rstrip("/")
    return url if url.endswith(API_PATH) else url + API_PATH


def alert_labels(event: dict[str, Any]) -> dict[str, str]:
    """The alert's identity, as a Prometheus rule's would be: its name is the
    rule's; the scope names itself (``deployment="chat"``, ``team=...``)."""
    return {
        "alertname": event["rule"],
        "source": "costapp",
        "metric": event["metric"],
        "grain": event["grain"],
        event["scope"]: event["name"],
    }


def postable_alerts(body: dict[str, Any], *, now: datetime) -> list[dict[str, Any]]:
    if not body["events"]:  # a test notification: one alert that ends at once
        stamp = now.isoformat().replace("+00:00", "Z")
        return [
            {
                "labels": {"alertname": "CostappTest", "source": "costapp"},
                "annotations": {"summary": f"costapp test ({body['channel']})"},
                "startsAt": stamp,
                "endsAt": stamp,
            }
        ]
    out = []
    for event in body_one_line(body)["events"]:
        resolved = event["kind"] == "resolved"
        annotations = {
            "summary": headline(event),
            "value": value_text(event["value"], event["metric"]),
            "baseline": value_text(event["baseline"], event["metric"]),
            "unit": event["unit"],
            "data_time": event["data_time"],
        }
        if event["reason"]:
            annotations["reason"] = event["reason"]
        if event["explanation"]:
            annotations["description"] = event["explanation"]
        alert: dict[str, Any] = {
            "labels": alert_labels(event),
            "annotations": {k: v for k, v in annotations.items() if v},
            "startsAt": event["data_time"],
            "endsAt": (now if resolved else now + HOLD).isoformat(),
        }
        link = event["explanation_url"] or body["site"]
        if link:
            alert["generatorURL"] = link
        out.append(alert)
    return out


class Alertmanager(HttpTransport):
    def url(self) -> str:
        return alerts_url(str(self.config["url"]))

    def payload(self, body: dict[str, Any]) -> bytes:
        return json.dumps(postable_alerts(body, now=datetime.now(UTC))).encode()
