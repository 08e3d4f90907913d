"""Slack incoming webhooks with Block Kit; the URL is the credential."""

from __future__ import annotations

import json
from typing import Any

from costapp.alerts import outbound
from costapp.alerts.payload import headline, value_text
from costapp.alerts.transports.base import HttpTransport, TransportError

PERMANENT = {"invalid_token", "no_service", "channel_is_archived", "channel_not_found"}


def blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not body["events"]:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": "costapp test"}}]
    for event in body["events"][:20]:
        out.append(
            {
                "type": "header",
                "text": {"type": "plain_text", "text": headline(event)[:150]},
            }
        )
        fields = [
            f"*Rule*\n{event['rule']}",
            f"*Value*\n{value_text(event['value'], event['metric'])}",
            f"*Baseline*\n{value_text(event['baseline'], event['metric'])}",
            f"*Data time*\n{event['data_time']}",
        ]
        out.append(
            {
                "type": "section",
                "fields": [{"type": "mrkdwn", "text": f} for f in fields],
            }
        )
        if event["explanation"]:
            text = event["explanation"][:2900]
            if event["explanation_url"]:
                text += f"\n<{event['explanation_url']}|Explanation>"
            out.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    return out


class Slack(HttpTransport):
    def payload(self, body: dict[str, Any]) -> bytes:
        text = headline(body["events"][0]) if body["events"] else "costapp test"
        return json.dumps({"text": text, "blocks": blocks(body)}).encode()

    def raise_for_response(self, response: outbound.Response) -> None:
        if response.status in self.ACCEPTED:
            return
        answer = response.body.decode("utf-8", "replace").strip()[:100]
        if answer in PERMANENT or response.status == 404:
            raise TransportError(
                f"Slack answered {response.status} {answer}",
                status=response.status,
                permanent=True,
            )
        if response.status == 400:
            # invalid_payload is our own bug: fail, never disable the channel.
            raise TransportError(
                f"Slack answered 400 {answer}", status=400, retry=False
            )
        super().raise_for_response(response)
