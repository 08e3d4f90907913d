from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.tasks import deliveries_queue
from costapp.management.followups import followups_run_or_queue
from costapp.models import Delivery, PipelineStep
from costapp.pipeline.change import Change
from costapp.pipeline.services import pipeline_request, step_claim, step_finish


class Command(BaseCommand):
    help = (
        "Evaluate every alert rule once (what the beat schedule runs), through "
        "the pipeline's alerts step (never beside a recompute), and send what it "
        "found. --replay also sends transitions on figures older than the rule "
        "or its last evaluation (history is otherwise recorded as 'not sent: "
        "historical')."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--replay", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["replay"]:
            steps = pipeline_request(steps=["alerts"], change=Change())
            followups_run_or_queue(steps, self.stdout)
            return
        # The replay holds the alerts step's lease like any evaluation.
        pipeline_request(steps=["alerts"], change=Change())
        claim = step_claim("alerts", exclusive=("unit_costs",))
        if claim is None:
            held = PipelineStep.objects.get(name="alerts").lease_owner
            raise CommandError(
                f"an evaluation or a recompute is running ({held or 'unit costs'}): "
                "try again in a moment"
            )
        ids = alert_rules_evaluate(now=timezone.now(), replay=True)
        step_finish(claim)
        deliveries_queue(ids)
        for row in Delivery.objects.filter(pk__in=ids).select_related("channel"):
            self.stdout.write(
                f"{row.channel.name}: {row.events.count()} event(s), {row.status}"
                + (f" ({row.error})" if row.error else "")
            )
        self.stdout.write(f"{len(ids)} notification(s)")
