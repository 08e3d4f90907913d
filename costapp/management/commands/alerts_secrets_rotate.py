"""``manage.py alerts_secrets_rotate``: every channel's settings under the first
key, from whatever key they were under (docs/security.md, "Channel secrets and
keys"). Settings no key decrypts are listed and left alone; the command then
exits 1, never with a traceback."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from costapp.alerts.services import SecretsRotated, secrets_rotate


def _unreadable(report: SecretsRotated) -> str:
    lines = [
        f"{len(report.unreadable)} channel(s) that no key decrypts were left as "
        "they are:"
    ]
    for name, made in report.unreadable:
        when = f"encrypted {made:%Y-%m-%d %H:%M} UTC" if made else "not a Fernet token"
        lines.append(f"  {name!r} ({when})")
    lines += [
        "To fix: add back the key each was encrypted with, last in the list: "
        "COSTAPP_SECRET_KEYS=NEW,OLD, where OLD is the key that was first in "
        "COSTAPP_SECRET_KEYS on that date (if COSTAPP_SECRET_KEYS was unset then, "
        "put that date's SECRET_KEY in SECRET_KEY_FALLBACKS instead); then run "
        "manage.py alerts_secrets_rotate again.",
        "Without a copy of that key, type the channel's target again on its page "
        "(a webhook gets a new signing secret) or delete the channel.",
    ]
    return "\n".join(lines)


class Command(BaseCommand):
    help = (
        "Re-encrypt every channel's settings with the first COSTAPP_SECRET_KEYS "
        "key, from any key that decrypts them (COSTAPP_SECRET_KEYS, a key derived "
        "from SECRET_KEY or SECRET_KEY_FALLBACKS, or from the development key); "
        "run it after putting a new key first, then drop the old key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        report = secrets_rotate()
        moved = sum(report.moved.values())
        sources = ", ".join(f"{n} from {label}" for label, n in report.moved.items())
        self.stdout.write(
            f"{moved} channel(s) re-encrypted under {report.to}"
            + (f" ({sources})" if sources else "")
            + f"; {report.current} already under it; "
            f"{len(report.unreadable)} not decrypted"
        )
        if report.public:
            self.stdout.write(
                self.style.WARNING(
                    "were under the published development key, so anyone with a "
                    "copy of the database could read them; consider new URLs and "
                    "signing secrets for: " + ", ".join(map(repr, report.public))
                )
            )
        if not settings.COSTAPP_SECRET_KEYS:
            self.stdout.write(
                self.style.WARNING(
                    "COSTAPP_SECRET_KEYS is not set: the secrets depend on "
                    "SECRET_KEY (production requires COSTAPP_SECRET_KEYS)"
                )
            )
        if report.unreadable:
            raise CommandError(_unreadable(report))
