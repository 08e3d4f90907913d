"""Channel secrets that cannot be used: ``check --deploy`` fails and the alerts
worker does not start until they can be (docs/security.md, "Channel secrets
and keys"). A worker that started anyway would mark every delivery failed
("cannot be decrypted") while the on-call engineer waits for pages."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import DatabaseError

from analytics.errors import shown
from costapp.alerts.secrets import ROTATION_STEPS, SecretError, keys, token_key
from costapp.models import Channel

logger = logging.getLogger(__name__)

# The queue CELERY_TASK_ROUTES sends costapp.alerts.tasks.* to.
ALERTS_QUEUE = "alerts"
SHOWN_NAMES = 10


@dataclass(frozen=True)
class SecretsState:
    unreadable: list[str] = field(default_factory=list)  # no key decrypts
    # Only the development key decrypts: rotation moves them, delivery refuses.
    development_only: list[str] = field(default_factory=list)
    # An older key decrypts: they work, and rotation moves them to the first.
    older_key: list[str] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return bool(self.unreadable or self.development_only)


def secrets_state() -> SecretsState:
    """Which channels' settings the configured keys can and cannot decrypt."""
    usable = keys()
    rotation = keys(rotation=True)
    state = SecretsState()
    for name, token in Channel.objects.order_by("name").values_list(
        "name", "config_encrypted"
    ):
        found = token_key(token, rotation)
        if found is None:
            state.unreadable.append(name)
        elif found[0].label == usable[0].label:
            continue
        elif any(k.label == found[0].label for k in usable):
            state.older_key.append(name)
        else:
            state.development_only.append(name)
    return state


def _names(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return ", ".join(shown(n) for n in names[:SHOWN_NAMES]) + more


def secrets_refusal(state: SecretsState) -> str | None:
    """What stops the alerts worker and ``check --deploy``, with the fix."""
    parts = []
    if state.unreadable:
        parts.append(
            f"{len(state.unreadable)} channel(s) have settings that no key "
            f"decrypts ({_names(state.unreadable)}): {ROTATION_STEPS}"
        )
    if state.development_only:
        parts.append(
            f"{len(state.development_only)} channel(s) are encrypted under the key "
            "derived from the published development SECRET_KEY "
            f"({_names(state.development_only)}): run manage.py "
            "alerts_secrets_rotate to move them under COSTAPP_SECRET_KEYS"
        )
    return "; ".join(parts) or None


def worker_start_refusal(queues: Iterable[str]) -> str | None:
    """Why a worker consuming ``queues`` must not start, or None. Only the
    alerts queue's worker needs channel secrets: ingestion goes on meanwhile."""
    if ALERTS_QUEUE not in set(queues):
        return None
    try:
        refusal = secrets_refusal(secrets_state())
    except SecretError as exc:
        return f"costapp alerts worker: not starting: {exc}"
    except DatabaseError as exc:
        # Not ours to judge: the worker reports an unreachable database itself.
        logger.warning("channel secrets not checked: %s", type(exc).__name__)
        return None
    if refusal is None:
        return None
    return f"costapp alerts worker: not starting: {refusal}"


@checks.register(checks.Tags.security, deploy=True)
def secret_keys_check(app_configs: Any = None, **_: Any) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    if not settings.DEBUG and not settings.COSTAPP_SECRET_KEYS:
        found.append(
            checks.Error(
                "COSTAPP_SECRET_KEYS is not set: channel secrets (webhook and Slack "
                "URLs, signing secrets) are encrypted under a key derived from "
                "SECRET_KEY, and a new SECRET_KEY would strand them",
                hint="set COSTAPP_SECRET_KEYS (or COSTAPP_SECRET_KEYS_FILE) to a key "
                "from python3 -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())', then run manage.py "
                "alerts_secrets_rotate",
                id="costapp.E101",
            )
        )
    try:
        state = secrets_state()
    except SecretError as exc:  # a key that is no Fernet key (a test's override)
        found.append(checks.Error(str(exc), id="costapp.E103"))
        return found
    except DatabaseError as exc:
        # Before migrate, or no database here: nothing stored to judge.
        found.append(
            checks.Info(
                f"channel secrets not checked: the database cannot be read "
                f"({type(exc).__name__})",
                id="costapp.I101",
            )
        )
        return found
    refusal = secrets_refusal(state)
    if refusal:
        found.append(
            checks.Error(
                refusal,
                hint="until then the alerts worker does not start",
                id="costapp.E102",
            )
        )
    if state.older_key:
        found.append(
            checks.Warning(
                f"{len(state.older_key)} channel(s) are still encrypted under an "
                f"older key ({_names(state.older_key)})",
                hint="run manage.py alerts_secrets_rotate, then the old key can go",
                id="costapp.W101",
            )
        )
    return found
