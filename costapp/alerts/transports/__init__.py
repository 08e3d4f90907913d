"""One transport per channel kind, imported lazily (hc/api/models.py)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from costapp.alerts.transports.base import Transport

TRANSPORTS = {
    "email": "costapp.alerts.transports.email.Email",
    "webhook": "costapp.alerts.transports.webhook.Webhook",
    "slack": "costapp.alerts.transports.slack.Slack",
    "alertmanager": "costapp.alerts.transports.alertmanager.Alertmanager",
    "pagerduty": "costapp.alerts.transports.pagerduty.PagerDuty",
}


def transport_for(kind: str) -> type[Transport]:
    module, _, name = TRANSPORTS[kind].rpartition(".")
    cls: type[Transport] = getattr(import_module(module), name)
    return cls
