"""Import a FOCUS 1.0-1.2 export (CSV or Parquet, local path or s3://bucket/key).

Run by an operator on the server, so it may name a local file; the web form
only takes uploads and S3 URIs under COSTAPP_FOCUS_S3_PREFIXES.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.ingest import ingest_run_create
from costapp.management.followups import followups_run_or_queue
from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute
from costapp.sources.base import Window
from costapp.validation import text_in


class Command(BaseCommand):
    help = (
        "Import a FOCUS export; each account's billing period in it is replaced whole."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("uri", metavar="PATH_OR_S3_URI")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            uri = text_in(opts["uri"], field="uri", max_length=1000, required=True)
        except InvalidInput as exc:
            raise CommandError(str(exc)) from None
        now = timezone.now()
        run = ingest_run_create(
            source="focus",
            window=Window(now, now + timedelta(seconds=1)),
            target=uri[:200],
            params={"uri": uri},
        )
        run, steps = run_execute(run, trusted=True)
        if run.status != IngestRun.SUCCEEDED:
            raise CommandError(run.error)
        self.stdout.write(
            f"imported {uri}: {run.steps_total} account-period(s), "
            f"{run.rows_written} lines written, {run.rows_deleted} replaced"
        )
        followups_run_or_queue(steps, self.stdout)
