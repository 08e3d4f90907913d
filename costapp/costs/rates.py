"""The rate card resolved to $ per GPU-hour: the provisional clock's price.

One lookup for every reader (overview, reconciliation, capacity what-ifs), so a
deployment is never priced two ways.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from costapp.models import Deployment, RateCard


@dataclass(frozen=True)
class RateKey:
    gpu_type: str
    instance_type: str
    region: str


def rate_key(deployment: Deployment) -> RateKey:
    """What prices a deployment: its pool's node type when it runs in one."""
    pool = deployment.pool
    if pool is not None:
        return RateKey(pool.gpu_type, pool.instance_type, pool.region)
    return RateKey(deployment.gpu_type, deployment.instance_type, deployment.region)


def card_per_gpu_hour(row: RateCard) -> Decimal:
    """A card's price per GPU-hour (an instance-hour price / its GPUs)."""
    price = Decimal(row.price)
    if row.unit == "instance_hour":
        price = price / Decimal(max(row.gpus_per_unit, 1))
    return price


class RateBook:
    """Rate card rows by GPU type, resolved to $ per GPU-hour for a day.

    A contract price beats the list price; a row for the deployment's instance
    type beats one without; the latest ``effective_from`` on or before the day
    wins. Prices for another region never apply.
    """

    def __init__(self, rows: Iterable[RateCard]) -> None:
        self._rows: dict[str, list[RateCard]] = defaultdict(list)
        for row in rows:
            self._rows[row.gpu_type].append(row)

    def per_gpu_hour(
        self, *, gpu_type: str, instance_type: str, region: str, day: date
    ) -> tuple[Decimal, str] | None:
        """(price per GPU-hour, currency), or None when no card applies."""
        row = self.card(
            gpu_type=gpu_type, instance_type=instance_type, region=region, day=day
        )
        return None if row is None else (card_per_gpu_hour(row), row.currency)

    def card(
        self, *, gpu_type: str, instance_type: str, region: str, day: date
    ) -> RateCard | None:
        """The rate card in force: contract beats list, an exact instance type
        beats a GPU-only card, then the latest effective date."""
        best: tuple[tuple[int, int, date], RateCard] | None = None
        for row in self._rows.get(gpu_type, []):
            if row.effective_from > day or row.region != region:
                continue
            if (
                row.instance_type
                and instance_type
                and row.instance_type != instance_type
            ):
                continue
            rank = (
                int(row.kind == "contract"),
                int(bool(row.instance_type)),
                row.effective_from,
            )
            if best is None or rank > best[0]:
                best = (rank, row)
        return None if best is None else best[1]

    def for_deployment(
        self, deployment: Deployment, day: date
    ) -> tuple[Decimal, str] | None:
        key = rate_key(deployment)
        return self.per_gpu_hour(
            gpu_type=key.gpu_type,
            instance_type=key.instance_type,
            region=key.region,
            day=day,
        )


def rate_book() -> RateBook:
    return RateBook(RateCard.objects.all())
