"""The product's one input error and the one way a message quotes a value.

Every value refused at an edge (a form, a command, a file, the capacity
engine's scenario) raises ``InvalidInput(field, value, reason)``; ``str()`` is
``field=value: reason`` with the value as ``shown`` quotes it. It lives in
``analytics`` (pure: no Django) so the engine and the Django side share it;
forms turn it into a field error with ``str(exc)``. tests/foundation/
test_shared_kit.py refuses a second definition of either.
"""

from __future__ import annotations

from datetime import date
from typing import Any

# A message quotes at most this much of a value: a 10 kB string never floods
# a page, a log line or an email.
SHOWN_CHARS = 80


def shown(value: Any) -> str:
    """``repr(value)`` cut to 80 characters, the cut marked "…": what a message
    may quote (a date as its ISO text, as a user typed it)."""
    text = repr(value.isoformat() if isinstance(value, date) else value)
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 1] + "…"
    return text


class InvalidInput(ValueError):
    """A value refused; ``str()`` is ``field=value: reason``."""

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={shown(value)}: {reason}")
