from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.days import utc_midnight
from costapp.management.arguments import day_argument
from costapp.management.followups import followups_run_or_queue
from costapp.models import Deployment
from costapp.pipeline.change import Change
from costapp.pipeline.services import pipeline_request
from costapp.pipeline.steps import ENTRY_STEPS


class Command(BaseCommand):
    help = (
        "Recompute the stored unit-cost figures, baselines, flags, idle and month "
        "forecasts, then evaluate the alert rules (the pipeline after new data). "
        "Without options: every series and day (the reference an incremental "
        "recompute must equal); --since DAY --deployment NAME ... for a part."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            type=day_argument("since"),
            help="first UTC day to rewrite (YYYY-MM-DD)",
        )
        parser.add_argument(
            "--deployment",
            action="append",
            dest="deployments",
            help="a changed deployment (repeat); its pool siblings follow",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names = options["deployments"]
        if names:
            known = Deployment.objects.filter(name__in=names)
            unknown = sorted(set(names) - set(known.values_list("name", flat=True)))
            if unknown:
                raise CommandError(
                    f"deployment={', '.join(unknown)!r}: not in the fleet"
                )
        since = options["since"]
        change = Change.of(
            since=utc_midnight(since) if since else None,
            series=names,
        )
        steps = pipeline_request(steps=ENTRY_STEPS["fleet"], change=change)
        followups_run_or_queue(steps, self.stdout)
