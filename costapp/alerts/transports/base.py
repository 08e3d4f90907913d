"""Transports send one notification once; retrying is the task's job.

Unlike healthchecks' ``tries_left`` loop, a transport never sleeps or loops:
``delivery_send_task`` retries with backoff, so a worker is never held by a
slow receiver longer than one timeout.

Names in a notification (channel, rule, deployment or team, the reason) come
from users, and rows stored before the name rule (``validation.name_problem``)
may still hold a line break: a transport that writes them into a header or a
line of text takes ``body_one_line(body)``, where each is one line.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from costapp.alerts import outbound
from costapp.models import Delivery
from costapp.validation import free_text_problem, name_problem

MAX_RETRY_AFTER_S = 3600


class TransportError(Exception):
    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        disable_now: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
        retry: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent  # counts toward disabling the channel
        self.disable_now = disable_now  # 410: disable at once
        self.status = status
        self.retry_after = retry_after
        self.retry = retry and not permanent  # worth another attempt


def _escape(char: str) -> str:
    # The escape repr writes inside its quotes (\r, \x85, \u202e) for
    # every character the name and free-text rules refuse.
    return char.encode("unicode_escape").decode("ascii")


def one_line(text: Any) -> str:
    """``text`` with every character the name rule refuses (line breaks,
    controls, bidi overrides) written as its escape, as ``repr`` writes it:
    ``a\\r\\nBcc: x``, one line that says what was stored."""
    text = str(text)
    if name_problem(text) is None:
        return text
    return "".join(_escape(c) if name_problem(c) else c for c in text)


def free_text(text: Any) -> str:
    """``one_line`` for free text (a cause): its line breaks are kept, as LF."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    if free_text_problem(text) is None:
        return text
    return "".join(_escape(c) if free_text_problem(c) else c for c in text)


def body_one_line(body: dict[str, Any]) -> dict[str, Any]:
    """The notification with each user-controlled name on one line."""
    return {
        **body,
        "channel": one_line(body["channel"]),
        "events": [
            {
                **event,
                "rule": one_line(event["rule"]),
                "name": one_line(event["name"]),
                "reason": one_line(event["reason"]) if event["reason"] else "",
                "explanation": free_text(event["explanation"])
                if event["explanation"]
                else "",
            }
            for event in body["events"]
        ],
    }


class Transport:
    def __init__(self, *, config: dict[str, Any]) -> None:
        self.config = config

    def notify(self, *, delivery: Delivery, body: dict[str, Any]) -> int | None:
        """Send; return the response code (None for email). Raises
        TransportError."""
        raise NotImplementedError


def retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class HttpTransport(Transport):
    ACCEPTED = (200, 201, 202, 204)

    def url(self) -> str:
        return str(self.config["url"])

    def payload(self, body: dict[str, Any]) -> bytes:
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    def headers(self, *, delivery: Delivery, data: bytes) -> dict[str, str]:
        return {"Content-Type": "application/json", "User-Agent": "costapp-alerts"}

    def notify(self, *, delivery: Delivery, body: dict[str, Any]) -> int | None:
        return self.send(delivery=delivery, data=self.payload(body))

    def send(self, *, delivery: Delivery, data: bytes) -> int:
        """One POST of ``data``; its response code. Raises TransportError."""
        try:
            response = outbound.post(
                self.url(),
                body=data,
                headers=self.headers(delivery=delivery, data=data),
                timeout=settings.COSTAPP_WEBHOOK_TIMEOUT_S,
            )
        except outbound.OutboundRefused as exc:
            raise TransportError(f"refused: {exc.reason}", retry=False) from None
        except outbound.OutboundFailed as exc:
            raise TransportError(str(exc)) from None
        except OSError as exc:
            raise TransportError(f"connection failed: {type(exc).__name__}") from None
        self.raise_for_response(response)
        return response.status

    def raise_for_response(self, response: outbound.Response) -> None:
        status = response.status
        if status in self.ACCEPTED:
            return
        text = f"received status code {status}"
        if 300 <= status < 400:
            # A redirect answers the same way next time: fail, do not retry.
            raise TransportError(
                f"{text} (redirects are not followed)", status=status, retry=False
            )
        if status >= 500 or status in (408, 429):
            raise TransportError(
                text,
                status=status,
                retry_after=retry_after_s(response.headers.get("retry-after")),
            )
        if status == 404:
            raise TransportError(text, status=status, permanent=True)
        raise TransportError(text, status=status, retry=False)
