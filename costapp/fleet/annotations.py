"""What changed under a deployment's cost chart, as dated marks: a rate card
taking effect for its GPUs and the first hour of its telemetry. A
configuration change is not among them: costapp keeps the engine's current
configuration only (``EngineDiscovery``), not its history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.db.models import Min, Q

from costapp import formatting as fmt
from costapp.costs.rates import card_per_gpu_hour, rate_key
from costapp.days import utc_midnight
from costapp.models import Deployment, DeploymentHour, RateCard


@dataclass(frozen=True)
class Mark:
    day: date
    kind: str  # rate card | fleet
    text: str


def deployment_marks_read(
    deployment: Deployment, *, start: date, end: date
) -> list[Mark]:
    """The marks in ``[start, end)`` (UTC days), in date order."""
    key = rate_key(deployment)
    marks = [
        Mark(
            card.effective_from,
            "rate card",
            f"rate card: {fmt.money(card_per_gpu_hour(card), card.currency, places=4)}"
            f"/GPU-h {card.get_kind_display()}"
            + (f", {card.instance_type}" if card.instance_type else ""),
        )
        for card in RateCard.objects.filter(
            Q(instance_type=key.instance_type) | Q(instance_type=""),
            gpu_type=key.gpu_type,
            region=key.region,
            effective_from__gte=start,
            effective_from__lt=end,
        ).order_by("effective_from", "pk")
    ]
    first = DeploymentHour.objects.filter(deployment=deployment).aggregate(
        first=Min("hour")
    )["first"]
    if first is not None and utc_midnight(start) <= first < utc_midnight(end):
        marks.append(Mark(first.date(), "fleet", "first hour of telemetry"))
    return sorted(marks, key=lambda m: (m.day, m.kind))
