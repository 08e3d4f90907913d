"""Rightsizing: the headroom the idle page prices, turned into an action.

Per deployment, the busiest complete hour of the last seven days against the
replicas its SLA needs then, from the same capacity per replica the headroom
figures use (``replica_capacity``: today's configuration through the capacity
engine), at the deployment's target utilisation; and what that headroom cost
over the last 30 complete days, read from the stored ``IdleFigure`` headroom
rows, so this page and the idle page never disagree.

A figure that could not be measured (no traffic, no capacity model, no
replica gauge) is missing, never zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Sum
from django.utils import timezone

from costapp.capacity.selectors import peak_hour_traffic
from costapp.economics.idle.capacity import calibrations_key_read, replica_capacity
from costapp.models import Deployment
from costapp.models.economics import IdleFigure

HEADROOM_DAYS = 30


@dataclass(frozen=True)
class Rightsizing:
    deployment: str
    team: str
    peak_hour: datetime | None
    requests_per_s: float | None  # at the peak hour
    replicas_running: float | None  # mean replicas up during the peak hour
    capacity_per_replica: float | None  # requests/s within the SLA
    method: str  # roofline | calibrated
    target_utilisation: float
    needed_at_sla: int | None  # replicas at 100% of the capacity
    recommended: int | None  # replicas at the target utilisation
    gpus_per_replica: float | None
    headroom_cost: Decimal | None  # last HEADROOM_DAYS complete days, known days
    headroom_gpu_hours: float | None
    headroom_days_known: int
    currency: str
    problem: str = ""

    @property
    def change(self) -> float | None:
        """Replicas to add (+) or remove (-) at the peak hour."""
        if self.recommended is None or self.replicas_running is None:
            return None
        return self.recommended - self.replicas_running

    @property
    def underestimated(self) -> bool:
        """The replicas up carried more than the model says they can: the
        capacity model is wrong for this deployment, not the fleet short
        (the idle page claims no headroom for such hours either)."""
        load, up = self.requests_per_s, self.replicas_running
        rate = self.capacity_per_replica
        if load is None or up is None or rate is None:
            return False
        return load > up * rate

    @property
    def gpus_running(self) -> float | None:
        if self.replicas_running is None or self.gpus_per_replica is None:
            return None
        return self.replicas_running * self.gpus_per_replica

    @property
    def gpus_recommended(self) -> float | None:
        if self.recommended is None or self.gpus_per_replica is None:
            return None
        return self.recommended * self.gpus_per_replica


def rightsizing_read(
    *, now: datetime | None = None, names: list[str] | None = None
) -> list[Rightsizing]:
    """Every deployment (or those ``names``), the largest headroom first.

    The peak is read over the seven days before the current UTC hour, so an
    hour still in progress is never the peak; the headroom over the
    ``HEADROOM_DAYS`` UTC days before today."""
    now = now or timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    today = hour.date()
    deployments = Deployment.objects.order_by("name")
    if names is not None:
        deployments = deployments.filter(name__in=names)
    headroom = {
        row["name"]: row
        for row in IdleFigure.objects.filter(
            scope="deployment",
            kind="headroom",
            day__gte=today - timedelta(days=HEADROOM_DAYS),
            day__lt=today,
            amount__isnull=False,
        )
        .values("name", "currency")
        .annotate(cost=Sum("amount"), gpu_hours=Sum("gpu_hours"), days=Count("day"))
    }
    calibrations = calibrations_key_read()
    out = []
    for deployment in deployments:
        capacity = replica_capacity(deployment, now=hour, calibrations=calibrations)
        traffic = peak_hour_traffic(deployment, now=hour)
        found = headroom.get(deployment.name)
        target = deployment.target_utilisation
        rate = capacity.requests_per_s
        load = traffic.requests_per_s if traffic else None
        needed = recommended = None
        if rate is not None and rate > 0 and load is not None:
            needed, recommended = _replicas(load, rate), _replicas(load, rate * target)
        problem = capacity.problem if rate is None else ""
        if traffic is None:
            problem = "no telemetry hours in the last 7 days"
        out.append(
            Rightsizing(
                deployment=deployment.name,
                team=deployment.team,
                peak_hour=traffic.hour if traffic else None,
                requests_per_s=load,
                replicas_running=traffic.replicas if traffic else None,
                capacity_per_replica=rate,
                method=capacity.method,
                target_utilisation=target,
                needed_at_sla=needed,
                recommended=recommended,
                gpus_per_replica=capacity.gpus_per_replica,
                headroom_cost=found["cost"] if found else None,
                headroom_gpu_hours=found["gpu_hours"] if found else None,
                headroom_days_known=found["days"] if found else 0,
                currency=found["currency"] if found else "USD",
                problem=problem,
            )
        )
    out.sort(key=lambda r: (-(r.headroom_cost or Decimal(0)), r.deployment))
    return out


def _replicas(load: float, per_replica: float) -> int:
    """At least one replica serves a deployment."""
    return max(1, math.ceil(load / per_replica))
