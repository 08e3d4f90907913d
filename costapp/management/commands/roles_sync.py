from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from costapp.roles import roles_sync


class Command(BaseCommand):
    help = (
        "Set the finance, tech lead and admin groups' permissions to exactly the "
        "sets declared in costapp/roles.py (also runs after every migrate)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for group, count in roles_sync().items():
            self.stdout.write(f"{group}: {count} permissions")
