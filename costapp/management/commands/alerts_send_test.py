from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from costapp.alerts.services import channel_test_send
from costapp.models import Channel


class Command(BaseCommand):
    help = "Send a test notification on a channel: one attempt, status and code."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("channel", help="the channel's name")

    def handle(self, *args: Any, **options: Any) -> None:
        channel = Channel.objects.filter(name=options["channel"]).first()
        if channel is None:
            names = ", ".join(Channel.objects.values_list("name", flat=True))
            raise CommandError(
                f"channel {options['channel']!r}: no such channel ({names})"
            )
        outcome = channel_test_send(channel=channel)
        code = outcome.response_code if outcome.response_code is not None else "-"
        line = f"{channel.name}: {outcome.status}, response code {code}, {outcome.duration_ms} ms"
        if outcome.error:
            line += f": {outcome.error}"
        if outcome.status != "sent":
            raise CommandError(line)
        self.stdout.write(line)
