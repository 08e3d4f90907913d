from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from costapp.alerts.services import secrets_rotate


class Command(BaseCommand):
    help = (
        "Re-encrypt every channel's settings with the first COSTAPP_SECRET_KEYS "
        "key; run it after putting a new key first, then drop the old key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{secrets_rotate()} channel(s) re-encrypted")
