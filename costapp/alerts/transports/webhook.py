"""Generic webhooks signed per the Standard Webhooks specification.

``webhook-id`` is the delivery's (one per event group and channel, unchanged
across retries: receivers dedupe on it); ``webhook-timestamp`` is this
attempt's Unix seconds; ``webhook-signature`` is ``v1,<base64 HMAC-SHA256>``
of ``{id}.{timestamp}.{body}``, once per active secret during a rotation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from costapp.alerts import outbound
from costapp.alerts.secrets import webhook_secret_key
from costapp.alerts.transports.base import HttpTransport, TransportError
from costapp.models import Delivery


def signature(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(webhook_secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


class Webhook(HttpTransport):
    def headers(self, *, delivery: Delivery, data: bytes) -> dict[str, str]:
        timestamp = int(time.time())
        secrets = [self.config["secret"], self.config.get("previous_secret") or ""]
        signatures = " ".join(
            signature(
                secret=s, msg_id=delivery.webhook_id, timestamp=timestamp, body=data
            )
            for s in secrets
            if s
        )
        return {
            **super().headers(delivery=delivery, data=data),
            "webhook-id": delivery.webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures,
        }

    def raise_for_response(self, response: outbound.Response) -> None:
        if response.status == 410:
            # Gone: the receiver told us to stop.
            raise TransportError(
                "received status code 410 (gone)",
                status=410,
                permanent=True,
                disable_now=True,
            )
        super().raise_for_response(response)
