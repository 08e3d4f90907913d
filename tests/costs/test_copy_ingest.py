"""The PostgreSQL COPY path of the CostLine upsert writes exactly what the ORM
path writes (awkward strings, NULLs, ten-decimal amounts, reruns)."""

from __future__ import annotations

from dataclasses import fields
from decimal import Decimal

import pytest

from costapp import ingest
from costapp.ingest import batch_write
from costapp.sources.base import Batch, CostRecord, ReplaceScope
from tests.costs.conftest import ACCOUNT, cost_lines, utc

pytestmark = [pytest.mark.django_db]


def batch(amount: str) -> Batch:
    records = [
        CostRecord(
            account_id=ACCOUNT,
            period_start=utc(2025, 3, 1 + day),
            service="Amazon\tElastic \\ Compute\nCloud ☁",
            usage_type=f"USE1-BoxUsage:p5.48xlarge-{n}",
            record_type="credit" if n % 5 == 0 else "usage",
            tag_key="team",
            tag_value="" if n % 3 else 'chat, "quoted"',
            amortized_cost=Decimal(amount) * (-1 if n % 5 == 0 else 1),
            unblended_cost=None if n % 2 else Decimal("0.0000000001"),
            usage_quantity=Decimal("24"),
            usage_unit="Hrs",
            estimated=bool(n % 2),
        )
        for day in range(3)
        for n in range(7)
    ]
    return Batch(
        records,
        ReplaceScope("cost_explorer", ACCOUNT, utc(2025, 3, 1), utc(2025, 4, 1)),
    )


def test_copy_and_orm_paths_store_the_same_lines(
    postgres_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch_write(batch=batch("12.3456789012"), source="cost_explorer")
    via_orm = cost_lines()
    monkeypatch.setattr(ingest, "COPY_MIN_ROWS", 1)
    from costapp.models import CostLine

    CostLine.objects.all().delete()
    written, _ = batch_write(batch=batch("12.3456789012"), source="cost_explorer")
    assert written == 21
    assert cost_lines() == via_orm
    # A rerun upserts in place: same rows, new amounts, no duplicates.
    batch_write(batch=Batch(batch("1.5").records), source="cost_explorer")
    assert len(cost_lines()) == 21
    amortized = 1 + [f.name for f in fields(CostRecord)].index("amortized_cost")
    assert {abs(line[amortized]) for line in cost_lines()} == {Decimal("1.5")}
