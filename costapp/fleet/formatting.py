"""Numbers as people read them: $1,234.56, 12.3k req, +4.2%.

Used by views to present selector results; templates only print strings.
"""

from __future__ import annotations

import math
from decimal import Decimal

MISSING = "\u2013"  # an en dash: no figure, which is not zero


def _missing(value: float | Decimal | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def usd(value: float | Decimal | None, *, places: int = 2) -> str:
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    sign = "-" if v < 0 else ""
    return f"{sign}${abs(v):,.{places}f}"


def usd_unit(value: float | Decimal | None) -> str:
    """Unit costs: three significant decimals below $1, cents above."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    return usd(v, places=3 if abs(v) < 1 else 2)


def count_short(value: float | None, unit: str = "") -> str:
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            text = f"{v / limit:,.1f}{suffix}"
            break
    else:
        text = f"{v:,.0f}"
    return f"{text} {unit}".strip()


def number(value: float | None, places: int = 1) -> str:
    if _missing(value):
        return MISSING
    return f"{float(value):,.{places}f}"  # type: ignore[arg-type]


def percent(value: float | None, *, signed: bool = False, places: int = 1) -> str:
    if _missing(value):
        return MISSING
    v = float(value) * 100  # type: ignore[arg-type]
    return f"{v:+.{places}f}%" if signed else f"{v:.{places}f}%"


def trend_class(change: float | None, *, threshold: float = 0.1) -> str:
    """CSS class for a change of a cost: up is bad, down is good."""
    if _missing(change):
        return ""
    c = float(change)  # type: ignore[arg-type]
    if c >= threshold:
        return "up"
    if c <= -threshold:
        return "down"
    return ""
