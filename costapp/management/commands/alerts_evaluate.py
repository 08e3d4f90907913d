from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.tasks import deliveries_queue
from costapp.models import Delivery


class Command(BaseCommand):
    help = (
        "Evaluate every alert rule once (what the beat schedule runs) and send "
        "what it found. --replay also sends transitions older than two periods "
        "(history is otherwise recorded as 'not sent: historical')."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--replay", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        ids = alert_rules_evaluate(now=timezone.now(), replay=options["replay"])
        deliveries_queue(ids)
        for row in Delivery.objects.filter(pk__in=ids).select_related("channel"):
            self.stdout.write(
                f"{row.channel.name}: {row.events.count()} event(s), {row.status}"
                + (f" ({row.error})" if row.error else "")
            )
        self.stdout.write(f"{len(ids)} notification(s)")
