from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.fleet.fleetfile import fleet_file_read, fleet_validate
from costapp.telemetry.prometheus_rules import rules_document
from costapp.yamlfile import FileProblems


class Command(BaseCommand):
    help = (
        "Write Prometheus alerting rules for a fleet file's SLOs, preemptions "
        "and KV cache (for Prometheus's rule_files; docs/alerts.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="fleet file, e.g. fleet.yaml")
        parser.add_argument(
            "--out", help="write here instead of standard output", default=None
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        try:
            data = fleet_file_read(path)
        except FileProblems as exc:
            raise CommandError(str(exc)) from None
        problems = fleet_validate(data, name=path.name)
        if problems:
            raise CommandError("\n".join(problems))
        text = rules_document(data.get("deployments") or [], source=path.name)
        if options["out"]:
            Path(options["out"]).write_text(text)
            self.stdout.write(f"wrote {options['out']}")
        else:
            self.stdout.write(text, ending="")
