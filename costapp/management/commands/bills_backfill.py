"""Backfill Cost Explorer for accounts over a window, with a cost plan first."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.costs.services import (
    BillsError,
    bills_backfill_create,
    bills_backfill_plan,
)
from costapp.management.arguments import day_argument
from costapp.management.followups import followups_run_or_queue
from costapp.models import IngestRun
from costapp.pipeline.runs import run_execute
from costapp.tasks import ingest_runs_queue

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Plan and run a Cost Explorer backfill (end exclusive). Each request and "
        "page costs $0.01; above COST_EXPLORER_BUDGET_USD it needs --yes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", action="append", required=True)
        parser.add_argument("--start", required=True, type=day_argument("start"))
        parser.add_argument("--end", required=True, type=day_argument("end"))
        parser.add_argument(
            "--granularity", choices=["DAILY", "HOURLY"], default="DAILY"
        )
        parser.add_argument("--tag-key", default="")
        parser.add_argument("--yes", action="store_true", help="accept the cost")
        parser.add_argument("--plan-only", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        kwargs = {
            "account_ids": opts["account"],
            "start": opts["start"],
            "end": opts["end"],
            "granularity": opts["granularity"],
            "tag_key": opts["tag_key"],
        }
        try:
            plan = bills_backfill_plan(**kwargs)
            self.stdout.write(
                f"{plan.requests} requests planned (${plan.cost_usd:.2f} before "
                f"pagination; budget ${plan.budget_usd:.2f})"
            )
            for reason in plan.refused:
                self.stderr.write(reason)
            if opts["plan_only"]:
                return
            if plan.over_budget and not opts["yes"]:
                raise CommandError("above the budget: rerun with --yes to accept")
            runs = bills_backfill_create(**kwargs, confirmed=opts["yes"])
        except BillsError as exc:
            raise CommandError(str(exc)) from None
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            ingest_runs_queue(runs)
            for run in runs:
                self.stdout.write(
                    f"run {run.pk} {run.target}: queued for the ingest worker; "
                    "the pipeline follows it there"
                )
            return
        steps: list[str] = []
        for run in runs:
            try:
                run, requested = run_execute(run)
                steps += requested
            except Exception:  # the run records its failure; the summary says it
                logger.exception("a backfill run crashed")
                run.refresh_from_db()
            self.stdout.write(
                f"run {run.pk} {run.target}: {run.status}, {run.api_requests} "
                f"requests, ${run.api_cost_usd}, {run.rows_written} rows"
                + (f" ({run.error})" if run.error else "")
            )
        followups_run_or_queue(steps, self.stdout)
        if any(r.status == IngestRun.FAILED for r in runs):
            raise CommandError("a run failed")
