"""A real SMTP server (aiosmtpd) on a loopback port, keeping what it got."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.services import free_port


@dataclass
class Mailbox:
    port: int
    messages: list[Message] = field(default_factory=list)
    refuse_with: str | None = None  # e.g. "550 no such user"


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    box = Mailbox(port=free_port())

    class Handler:
        async def handle_RCPT(
            self, server: Any, session: Any, envelope: Any, address: str, options: Any
        ) -> str:
            if box.refuse_with:
                return box.refuse_with
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            box.messages.append(
                message_from_bytes(envelope.original_content, policy=policy.default)
            )
            return "250 Message accepted for delivery"

    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
