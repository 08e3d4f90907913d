"""Errors the capacity engine raises; each names the field and the value at fault.

A malformed input is the product's one ``analytics.errors.InvalidInput``;
what is the engine's own is a well-formed scenario that cannot run
(``Infeasible``) and one vLLM itself refuses (``Refused``, an input error too).
"""

from __future__ import annotations

from typing import Any

from analytics.errors import InvalidInput


class CapacityError(Exception):
    """Base class so callers (views, CLI) can catch the engine's own refusals;
    they catch ``InvalidInput`` beside it for a malformed scenario."""


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
