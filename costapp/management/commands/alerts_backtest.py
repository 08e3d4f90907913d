from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from costapp.alerts.selectors import alert_rule_backtest
from costapp.models import AlertRule


class Command(BaseCommand):
    help = "What a rule would have done over the stored figures (writes nothing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rule", help="the rule's name")
        parser.add_argument("--days", type=int, default=90)

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if not 1 <= days <= 400:
            raise CommandError(f"--days {days}: must be between 1 and 400")
        rule = AlertRule.objects.filter(name=options["rule"]).first()
        if rule is None:
            names = ", ".join(AlertRule.objects.values_list("name", flat=True))
            raise CommandError(f"rule {options['rule']!r}: no such rule ({names})")
        result = alert_rule_backtest(rule=rule, now=timezone.now(), days=days)
        self.stdout.write(result.sentence)
        for i in result.incidents:
            end = f"{i.resolved_at:%Y-%m-%d %H:%M}" if i.resolved_at else "firing"
            self.stdout.write(
                f"  {i.fired_at:%Y-%m-%d %H:%M} .. {end}  {i.name}  "
                f"value {i.value} baseline {i.baseline}  {i.explanation}"
            )
