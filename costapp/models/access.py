"""Who may do what, and what they did.

``Capability`` is not a table: it anchors the product's action permissions
(``costapp.run_backfill`` and the others below) so they live in
``Meta.permissions`` beside the model permissions Django creates, and
``costapp/roles.py`` can attach both kinds to the groups. ``AuditEntry`` is the
append-only log of every state-changing request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Capability(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_overview", "See the overview: spend, forecast, budgets, unit costs"),
            ("view_bills", "See bill lines, reconciliation and run progress"),
            ("export_bills", "Download the finance CSV exports"),
            ("view_fleet", "See deployment, telemetry and unit-cost pages"),
            ("run_whatif", "Run capacity what-ifs, MIG comparisons and searches"),
            ("run_backfill", "Start Cost Explorer or Prometheus backfills"),
            ("import_focus", "Import FOCUS files (replaces a bill period)"),
            ("manage_sources", "Configure sources, pools and rate cards"),
            ("manage_channels", "Configure alert channels"),
            ("rotate_channel_secrets", "Rotate and retire webhook signing secrets"),
            ("manage_users", "Create users and put them in the product's groups"),
        ]

    def __str__(self) -> str:
        return "capability"


class AuditEntry(models.Model):
    """One request that changed state or spent money. Rows are never updated or
    deleted by the application (``save`` and ``delete`` refuse)."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept as text too: the entry outlives the user it names.
    username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=200)  # URL name, e.g. "costs:backfill"
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    target = models.CharField(max_length=500, blank=True)  # the URL's own arguments
    params = models.JSONField(default=dict, blank=True)
    status_code = models.PositiveSmallIntegerField()
    client_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action} {self.status_code}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("audit entries are append-only")
