"""manage.py telemetry_backfill --deployment chat --start 2025-06-01 --end 2025-06-08"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.errors import InvalidInput
from costapp.management.followups import followups_run_or_queue
from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute
from costapp.telemetry.services import telemetry_run_create


def _when(value: str, field: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"--{field}: {value!r} is not an ISO date or date-time"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Backfill hourly telemetry from Prometheus for a window (UTC)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", action="append", required=True)
        parser.add_argument("--start", required=True, help="ISO date/time, UTC")
        parser.add_argument("--end", required=True, help="ISO date/time, exclusive")
        parser.add_argument(
            "--dcgm-selector",
            default="",
            help='DCGM label matchers for these deployments, e.g. Hostname="node-a" '
            "(this run only; default: each deployment's dcgm_selector)",
        )
        parser.add_argument("--scrape-interval", type=float, default=None)
        parser.add_argument("--slice-hours", type=int, default=None)
        parser.add_argument(
            "--confirm",
            action="store_true",
            help="start even when the backfill is over the step budget",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        names: list[str] = opts["deployment"]
        try:
            run = telemetry_run_create(
                deployments=names,
                start=_when(opts["start"], "start"),
                end=_when(opts["end"], "end"),
                dcgm_selectors={n: opts["dcgm_selector"] for n in names}
                if opts["dcgm_selector"]
                else None,
                options={
                    "scrape_interval_s": opts["scrape_interval"],
                    "slice_hours": opts["slice_hours"],
                },
                confirmed=opts["confirm"],
            )
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"run {run.pk}: {run.window_start} .. {run.window_end}")
        run, steps = run_execute(run)
        self.stdout.write(
            f"run {run.pk} {run.status}: {run.steps_done}/{run.steps_total} steps, "
            f"{run.rows_written} rows, {run.api_requests} requests to Prometheus"
        )
        for warning in run.warnings:
            self.stderr.write(f"warning: {warning}")
        followups_run_or_queue(steps, self.stdout)
        if run.status != IngestRun.SUCCEEDED:
            raise CommandError(f"run {run.pk} {run.status}: {run.error}")
