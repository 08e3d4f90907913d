from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.fleet.fleetfile import FleetFileError, fleet_load


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
            result = fleet_load(path=options["path"], prune=options["prune"])
        except FleetFileError as exc:
            raise CommandError(str(exc)) from None
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
        if result.missing and not result.pruned:
            self.stdout.write(
                self.style.WARNING(
                    "not in the file but kept (use --prune to delete): "
                    + ", ".join(result.missing)
                )
            )
