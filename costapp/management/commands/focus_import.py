"""Import a FOCUS 1.0-1.2 export (CSV or Parquet, local path or s3://bucket/key)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.costs.services import focus_import_execute
from costapp.ingest import ingest_run_create
from costapp.models import IngestRun
from costapp.sources.base import Window


class Command(BaseCommand):
    help = (
        "Import a FOCUS export; each account's billing period in it is replaced whole."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("uri", metavar="PATH_OR_S3_URI")

    def handle(self, *args: Any, **opts: Any) -> None:
        from django.utils import timezone

        now = timezone.now()
        run = ingest_run_create(
            source="focus",
            window=Window(now, now + timedelta(seconds=1)),
            target=opts["uri"][:200],
            params={"uri": opts["uri"]},
        )
        run = focus_import_execute(run=run)
        if run.status != IngestRun.SUCCEEDED:
            raise CommandError(run.error)
        self.stdout.write(
            f"imported {opts['uri']}: {run.steps_total} account-period(s), "
            f"{run.rows_written} lines written, {run.rows_deleted} replaced"
        )
