"""Where the data ends, per deployment and per bill account: what staleness
rules watch.

A silent ingest silently disables every other alert, so each feed is watched
on the newest data it stored, not on a run's requested window (which ends
with the current hour, and says nothing about a deployment Prometheus no
longer answers for):

- ``staleness``: each deployment's newest stored sample (``last_sample_at``
  of its newest hour; the hour's end for rows stored before it was kept).
  Watched: every deployment with a Prometheus selector or stored telemetry;
  one with a selector and no telemetry at all is stale (it never delivered).
- ``bill_staleness``: each Cost Explorer account's newest bill day, to its
  end. Watched: ``COST_EXPLORER_ACCOUNTS`` and every account with Cost
  Explorer lines. FOCUS files are uploads, not a feed: never stale.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max

from costapp.models import AlertRule, CostLine, Deployment, DeploymentHour

HOUR = timedelta(hours=1)
GRAIN_LENGTH = {"day": timedelta(days=1), "hour": HOUR}


def telemetry_ends(names: list[str] | None = None) -> dict[str, datetime | None]:
    """Per watched deployment (``names``: only these), its newest sample."""
    watched = Deployment.objects.all()
    if names is not None:
        watched = watched.filter(name__in=names)
    with_selector = set(
        watched.exclude(prometheus_selector="").values_list("name", flat=True)
    )
    rows = (
        DeploymentHour.objects.filter(deployment__in=watched)
        .values("deployment__name")
        .annotate(hour=Max("hour"), sample=Max("last_sample_at"))
    )
    out: dict[str, datetime | None] = {name: None for name in with_selector}
    for row in rows:
        # A sample in the newest hour is the newest; without one kept (older
        # rows), the hour's end is as far as the data is known to go.
        end = row["hour"] + HOUR
        sample = row["sample"]
        out[row["deployment__name"]] = (
            sample if sample and sample >= row["hour"] else end
        )
    return out


def bill_ends() -> dict[str, datetime | None]:
    """Per watched Cost Explorer account, the end of its newest bill period."""
    out: dict[str, datetime | None] = {
        str(a): None for a in settings.COST_EXPLORER_ACCOUNTS
    }
    rows = (
        CostLine.objects.filter(source="cost_explorer")
        .values("account_id", "granularity")
        .annotate(last=Max("period_start"))
    )
    for row in rows:
        end = row["last"] + GRAIN_LENGTH.get(row["granularity"], timedelta(days=1))
        seen = out.get(row["account_id"])
        out[row["account_id"]] = end if seen is None else max(seen, end)
    return out


def staleness_ends(rule: AlertRule) -> dict[str, datetime | None]:
    """The feeds ``rule`` watches and where each one's data ends."""
    if rule.metric == "bill_staleness":
        ends = bill_ends()
        return {
            k: v for k, v in ends.items() if not rule.scope_name or k == rule.scope_name
        }
    names: list[str] | None = None
    if rule.scope == "deployment" and rule.scope_name:
        names = [rule.scope_name]
    elif rule.scope == "team" and rule.scope_name:
        names = list(
            Deployment.objects.filter(team=rule.scope_name).values_list(
                "name", flat=True
            )
        )
    elif rule.scope == "team":
        names = list(Deployment.objects.exclude(team="").values_list("name", flat=True))
    return telemetry_ends(names)
