from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

# The three kinds of users (PRODUCT.md): permissions are by model, views check
# group membership where finance and tech leads differ.
GROUPS = {
    "finance": ["view_costline", "view_ratecard", "view_deployment", "view_pool"],
    "tech lead": [
        "view_costline",
        "view_ratecard",
        "view_deployment",
        "change_deployment",
        "view_pool",
        "add_scenario",
        "view_scenario",
        "add_calibration",
        "view_calibration",
    ],
    "admin": ["*"],
}


def ensure_groups(**_: Any) -> None:
    from django.contrib.auth.models import Group, Permission

    app_perms = Permission.objects.filter(content_type__app_label="costapp")
    for name, codenames in GROUPS.items():
        group, _created = Group.objects.get_or_create(name=name)
        perms = (
            app_perms
            if codenames == ["*"]
            else app_perms.filter(codename__in=codenames)
        )
        group.permissions.set(perms)


class CostappConfig(AppConfig):
    name = "costapp"
    verbose_name = "costapp"

    def ready(self) -> None:
        post_migrate.connect(ensure_groups, sender=self)
