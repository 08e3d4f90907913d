from __future__ import annotations

import time
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from costapp.economics.idle import idle_figures_recompute
from costapp.economics.services import unit_costs_recompute


class Command(BaseCommand):
    help = (
        "Recompute the stored unit-cost figures, baselines and flags. Without "
        "options: every series and day (the reference an incremental recompute "
        "must equal); --since DAY --deployment NAME ... for a part."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", help="first UTC day to rewrite (YYYY-MM-DD)")
        parser.add_argument(
            "--deployment",
            action="append",
            dest="deployments",
            help="a changed deployment (repeat); its pool siblings follow",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        since = None
        if options["since"]:
            try:
                since = date.fromisoformat(options["since"])
            except ValueError as exc:
                raise CommandError(
                    f"--since {options['since']!r}: not a date (YYYY-MM-DD)"
                ) from exc
        started = time.perf_counter()
        result = unit_costs_recompute(
            now=timezone.now(), since=since, series=options["deployments"]
        )
        idle = idle_figures_recompute(
            now=timezone.now(), since=since, series=options["deployments"]
        )
        self.stdout.write(
            f"unit costs: {result.rows_written} figures written "
            f"({result.flagged} flagged), {result.rows_deleted} replaced, "
            f"in {time.perf_counter() - started:.1f} s; idle: {idle.rows_written} "
            "figures written"
        )
