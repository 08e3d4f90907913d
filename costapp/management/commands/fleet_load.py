from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from costapp.alerts.fleetfile import alert_rules_load
from costapp.fleet.fleetfile import fleet_load
from costapp.fleet.services import rate_card_seed
from costapp.management.followups import followups_run_or_queue
from costapp.pipeline.change import Change
from costapp.pipeline.services import pipeline_request
from costapp.pipeline.steps import ENTRY_STEPS
from costapp.yamlfile import FileProblems


class Command(BaseCommand):
    help = "Load pools and deployments from a fleet file (YAML); all or nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="fleet file, e.g. fleet.yaml")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="delete deployments the file no longer lists (and their telemetry)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            # One transaction: a bad alerts: section loads no fleet either.
            with transaction.atomic():
                result = fleet_load(path=options["path"], prune=options["prune"])
                alerts = alert_rules_load(path=options["path"])
        except FileProblems as exc:
            raise CommandError(str(exc)) from None
        # The dated list prices of the catalogue, so GPU-hours have a
        # provisional price before any bill (contract prices win; idempotent).
        seeded = rate_card_seed()
        for label, names in (
            ("created", result.created),
            ("updated", result.updated),
            ("unchanged", result.unchanged),
            ("pools created", result.pools_created),
            ("pools updated", result.pools_updated),
            ("pruned", result.pruned),
        ):
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        if seeded:
            self.stdout.write(f"rate card: {seeded} list price(s) added")
        if alerts.rules or alerts.channels:
            self.stdout.write(
                f"alerts: {len(alerts.rules)} rule(s), {len(alerts.channels)} channel(s)"
            )
        # Changed rules, pools, members or rates move the allocation and every
        # figure on it: the pipeline from the cost shares on, every series.
        steps = pipeline_request(steps=ENTRY_STEPS["fleet"], change=Change())
        followups_run_or_queue(steps, self.stdout)
        for name, secret in alerts.new_secrets.items():
            # Shown once: the receiver needs it to verify signatures.
            self.stdout.write(f"new webhook secret for {name}: {secret}")
        if result.missing and not result.pruned:
            self.stdout.write(
                self.style.WARNING(
                    "not in the file but kept (use --prune to delete): "
                    + ", ".join(result.missing)
                )
            )
