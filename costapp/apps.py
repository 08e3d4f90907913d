from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from costapp.pagecache import change_triggers_install

# The imports inside functions below are lazy for app loading: Django imports
# this module before the app registry is ready, and roles, access and the
# alerts checks import models (AppRegistryNotReady at the top).


def _roles_sync(**_: Any) -> None:
    from costapp.roles import roles_sync

    roles_sync()


def _change_triggers_install(using: str = "default", **_: Any) -> None:
    change_triggers_install(using)


class CostappConfig(AppConfig):
    name = "costapp"
    verbose_name = "costapp"

    def ready(self) -> None:
        from costapp import access
        from costapp.alerts import checks  # noqa: F401 (registers the deploy checks)

        # After Django's own post_migrate handlers have created this app's
        # permission rows (they connect first, in auth's ready()).
        post_migrate.connect(_roles_sync, sender=self)
        # Every costapp table, those later migrations add included.
        post_migrate.connect(_change_triggers_install, sender=self)
        access.connect_signals()
