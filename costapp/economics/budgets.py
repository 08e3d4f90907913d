"""Writes of budgets: the monthly amount a scope may spend, which the month
forecasts burn against (``costapp.economics.forecasts``)."""

from __future__ import annotations

from decimal import Decimal

from costapp.models import Budget


def budget_upsert(
    *, scope: str, name: str, monthly_amount: Decimal, currency: str = "USD"
) -> Budget:
    budget, _ = Budget.objects.update_or_create(
        scope=scope,
        name=name,
        currency=currency,
        defaults={"monthly_amount": monthly_amount},
    )
    return budget


def budget_delete(*, pk: int) -> bool:
    deleted, _ = Budget.objects.filter(pk=pk).delete()
    return bool(deleted)
