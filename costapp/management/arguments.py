"""Argument types the management commands share.

An argparse ``type=`` must raise ``ArgumentTypeError`` (or ``ValueError``) to
be a usage message; a ``CommandError`` raised there escapes argparse as a
traceback. These read a value through the product's one input layer
(``costapp.validation``), so a command refuses ``--start 2026-13-01`` with
the words every page uses.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import date

from analytics.errors import InvalidInput
from costapp.validation import date_in


def day_argument(field: str) -> Callable[[str], date]:
    """``type=`` for a UTC day ``YYYY-MM-DD`` in the supported range."""

    def parse(value: str) -> date:
        try:
            return date_in(value, field=field)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse
