"""Slack incoming webhooks with Block Kit; the URL is the credential.

Every user-controlled string (rule, deployment or team names, the reason, the
cause text) is escaped as Slack's mrkdwn asks (``&``, ``<``, ``>``:
https://api.slack.com/reference/surfaces/formatting#escaping), so a rule named
``<!channel>`` or ``<https://evil.example|Re-authenticate>`` is shown as
typed, never a mention of everyone nor a link. Names are one line first
(``body_one_line``): a line break cannot fake a field of its own.
"""

from __future__ import annotations

import json
from typing import Any

from costapp.alerts import outbound
from costapp.alerts.payload import headline, value_text
from costapp.alerts.transports.base import HttpTransport, TransportError, body_one_line

PERMANENT = {"invalid_token", "no_service", "channel_is_archived", "channel_not_found"}


def escaped(text: str) -> str:
    """``text`` for a mrkdwn field or the message's ``text``: shown as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not body["events"]:
        return [{"type": "section", "text": {"type": "mrkdwn", "text": "costapp test"}}]
    body = body_one_line(body)
    for event in body["events"][:20]:
        out.append(
            {
                # plain_text: Slack parses neither mentions nor links in it.
                "type": "header",
                "text": {"type": "plain_text", "text": headline(event)[:150]},
            }
        )
        fields = [
            f"*Rule*\n{escaped(event['rule'])}",
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
            text = escaped(event["explanation"][:2900])
            if event["explanation_url"]:
                text += f"\n<{event['explanation_url']}|Explanation>"
            out.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    return out


def fallback_text(body: dict[str, Any]) -> str:
    """The message's ``text`` (notifications, and clients without blocks):
    mrkdwn, so escaped too."""
    if not body["events"]:
        return "costapp test"
    return escaped(headline(body_one_line(body)["events"][0]))


class Slack(HttpTransport):
    def payload(self, body: dict[str, Any]) -> bytes:
        return json.dumps(
            {"text": fallback_text(body), "blocks": blocks(body)}
        ).encode()

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
