"""Store the telemetry pages' two-hour rollups of a window (data loaded with
COPY, or from before migration 0013): ``costapp.telemetry.rollups``."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Max, Min

from costapp.management.arguments import day_argument
from costapp.models import DeploymentHour
from costapp.telemetry.rollups import rollups_rebuild

MAX_DAYS = 3660


class Command(BaseCommand):
    help = "Store the telemetry rollups of a window (default: every day with hours)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", type=day_argument("start"), default=None)
        parser.add_argument(
            "--end", type=day_argument("end"), default=None, help="exclusive"
        )
        parser.add_argument("--deployment", action="append", default=[])

    def handle(self, *args: Any, **options: Any) -> None:
        span = DeploymentHour.objects.aggregate(a=Min("hour"), b=Max("hour"))
        if span["a"] is None and not (options["start"] and options["end"]):
            self.stdout.write("no deployment-hours: nothing to roll up")
            return
        start = options["start"] or span["a"].date()
        end = options["end"] or span["b"].date() + timedelta(days=1)
        if not start < end:
            raise CommandError(f"--end={end}: must be after --start={start}")
        if (end - start).days > MAX_DAYS:
            raise CommandError(
                f"--start={start} --end={end}: over {MAX_DAYS} days; roll up "
                "a shorter window"
            )
        began = time.perf_counter()
        days = rollups_rebuild(
            start=start, end=end, deployments=options["deployment"] or None
        )
        self.stdout.write(
            f"rolled up {days} deployment-days ({start} .. {end}) in "
            f"{time.perf_counter() - began:.1f} s"
        )
