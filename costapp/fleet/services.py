"""Writes for the fleet area."""

from __future__ import annotations

from django.db import transaction

from costapp.catalog import LIST_PRICES
from costapp.models import RateCard


@transaction.atomic
def rate_card_seed() -> int:
    """Upsert the on-demand list prices of ``costapp.catalog`` into the rate card.

    Idempotent: rows are keyed by (gpu_type, instance_type, region, kind,
    effective_from); contract prices a user entered are never touched.
    Returns the number of rows created.
    """
    created = 0
    for price in LIST_PRICES:
        _row, was_created = RateCard.objects.update_or_create(
            gpu_type=price.gpu_type,
            instance_type=price.instance_type,
            region=price.region,
            kind="list",
            effective_from=price.effective_from,
            defaults={
                "unit": "instance_hour",
                "gpus_per_unit": price.gpus,
                "price": price.price_per_hour,
                "currency": "USD",
                "source": price.source,
            },
        )
        created += was_created
    return created
