"""Store (or restore) the allocation of a window of UTC days.

    manage.py costs_allocate                      # every stale or missing day
    manage.py costs_allocate --start 2026-01-01 --end 2026-12-01 --all

``--end`` is exclusive. Without ``--all`` only days whose stored shares are
missing or stale (a run or a rule change since they were computed) are
recomputed; with it every day of the window is. Days never stored are still
correct without this command (allocated on the fly), only slower to read.
"""

from __future__ import annotations

import time
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.costs.shares import cost_shares_rebuild

MAX_DAYS = 3660


def _day(name: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"--{name} {value!r}: not a date (YYYY-MM-DD)") from exc


class Command(BaseCommand):
    help = "Store the allocated bill (CostShare) for a window of UTC days."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", help="first UTC day (YYYY-MM-DD)")
        parser.add_argument("--end", help="UTC day after the last (exclusive)")
        parser.add_argument(
            "--all", action="store_true", help="recompute fresh days too"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        start, end = _day("start", options["start"]), _day("end", options["end"])
        if start and end and start >= end:
            raise CommandError(f"--end {end}: not after --start {start}")
        if start and end and (end - start).days > MAX_DAYS:
            raise CommandError(f"--end {end}: more than {MAX_DAYS} days after --start")
        t0 = time.perf_counter()
        result = cost_shares_rebuild(
            start=start, end=end, stale_only=not options["all"]
        )
        self.stdout.write(
            f"stored {result.days} day(s): {result.shares} shares, "
            f"{result.usage_rows} usage rows in {time.perf_counter() - t0:.1f} s"
        )
