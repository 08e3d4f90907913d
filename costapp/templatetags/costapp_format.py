"""The one number formatter (costapp.formatting) as template filters, for the
few values a page shows as stored."""

from __future__ import annotations

from django import template

from costapp import formatting

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return formatting.duration(seconds)


@register.filter
def money(value: object, currency: str = "USD") -> str:
    """An amount with its currency (``{{ x|money:"USD" }}``); a missing figure is formatting.MISSING."""
    return formatting.money(value, currency)  # type: ignore[arg-type]
