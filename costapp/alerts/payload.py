"""One notification as one JSON dict (docs/alerts.schema.json).

The webhook body, the Slack blocks and the email context are all built from
this dict, so the three channels never disagree about what happened.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.urls import reverse

from costapp.formatting import duration
from costapp.models import AlertEvent, Delivery

SCHEMA_VERSION = 1
UNITS = {
    "cost_per_1k_requests": "$ per 1k requests",
    "cost_per_1m_tokens": "$ per 1M tokens",
    "daily_spend": "$",
    "budget_burn": "% of budget",
    "idle_cost": "$ idle",
    "staleness": "hours since the newest sample",
    "bill_staleness": "hours since the newest bill day",
}
SCOPES = {"staleness": "deployment", "bill_staleness": "account"}


def explanation_url(event: AlertEvent) -> str | None:
    if event.figure_id is None:
        return None
    return settings.SITE_URL + reverse(
        "economics:explanation", kwargs={"figure_id": event.figure_id}
    )


def event_dict(event: AlertEvent) -> dict[str, Any]:
    rule = event.rule
    return {
        "rule": rule.name,
        "metric": rule.metric,
        "unit": UNITS.get(rule.metric, ""),
        "grain": rule.grain,
        "scope": SCOPES.get(rule.metric, rule.scope),
        "name": event.scope_name,
        "kind": event.kind,
        "data_time": event.data_time.isoformat(),
        "value": event.value,
        "baseline": event.baseline,
        "reason": event.reason,
        "explanation": event.explanation,
        "explanation_url": explanation_url(event),
        "late_s": round(event.late_s) if event.late_s is not None else None,
    }


def notification(
    *, delivery: Delivery, events: Iterable[AlertEvent] | None = None
) -> dict[str, Any]:
    rows = list(events if events is not None else delivery.events.all())
    return {
        "type": "costapp.alert",
        "version": SCHEMA_VERSION,
        "id": delivery.webhook_id,
        "test": delivery.is_test,
        "site": settings.SITE_URL,
        "channel": delivery.channel.name,
        "events": [event_dict(e) for e in rows],
    }


def value_text(value: float | None, metric: str) -> str:
    if value is None:
        return "no value"
    if metric == "budget_burn":
        return f"{value:.0f}%"
    if metric in SCOPES:
        return f"{value:.1f} h"
    return f"${value:,.2f}" if abs(value) >= 10 else f"${value:,.4f}"


def headline(event: dict[str, Any]) -> str:
    """The subject line: deployment, metric, value and baseline."""
    kind = {"firing": "FIRING", "repeat": "STILL FIRING", "resolved": "RESOLVED"}
    metric = event["metric"].replace("_", " ")
    text = (
        f"[costapp {kind.get(event['kind'], event['kind'])}] {event['name']}: "
        f"{metric} {value_text(event['value'], event['metric'])}"
    )
    if event["baseline"] is not None:
        text += f" (baseline {value_text(event['baseline'], event['metric'])})"
    if event["reason"]:
        text += f" ({event['reason']})"
    if event.get("late_s"):
        text += f" (late: {duration(event['late_s'])} after the period closed)"
    return text


def subject(body: dict[str, Any]) -> str:
    events = body["events"]
    if not events:
        return "[costapp] test notification"
    more = f" (+{len(events) - 1} more)" if len(events) > 1 else ""
    return headline(events[0]) + more
