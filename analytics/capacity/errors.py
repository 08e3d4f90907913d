"""Errors the capacity engine raises; each names the field and the value at fault."""

from __future__ import annotations

from typing import Any


class CapacityError(Exception):
    """Base class so callers (views, CLI) can catch the engine's own refusals."""


class InvalidInput(CapacityError, ValueError):
    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class Infeasible(CapacityError):
    """The scenario is well formed but cannot run (memory, SLA, placement)."""

    def __init__(self, reason: str, *, field: str | None = None) -> None:
        self.reason = reason
        self.field = field
        super().__init__(reason)


class Refused(InvalidInput):
    """vLLM itself refuses this configuration; ``reason`` quotes vLLM's message.

    ``code`` names the check and ``source`` the vLLM file/function that makes it,
    so the page and the CLI can say "does not start" with vLLM's own words.
    """

    def __init__(
        self, field: str, value: Any, reason: str, *, code: str, source: str
    ) -> None:
        super().__init__(field, value, reason)
        self.code = code
        self.source = source
