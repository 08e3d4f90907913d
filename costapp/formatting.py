"""Numbers as people read them: $1,234.56, 12.3k req, +4.2% (days: costapp/days.py).

Used by views to present selector results; templates only print strings. Every
area formats through this one module, so a missing figure reads the same
everywhere (``MISSING``) and every amount can carry its currency (``money``).
"""

from __future__ import annotations

import math
from decimal import Decimal

MISSING = "\u2013"  # an en dash: no figure, which is not zero
# Currencies written with a symbol; any other ISO 4217 code is written out
# before the amount ("EUR 1,234.56"), so no amount is shown without its currency.
SYMBOLS = {"USD": "$"}


def _missing(value: float | Decimal | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def money(value: float | Decimal | None, currency: str, *, places: int = 2) -> str:
    """An amount with its currency: ``$1,234.56``, ``-$3.10``, ``EUR 12.00``."""
    if not currency:
        raise ValueError(f"currency = {currency!r}: an amount needs its currency")
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    amount = f"{abs(v):,.{places}f}"
    # A change that rounds to nothing is no loss: "$0.000", never "-$0.000".
    sign = "-" if v < 0 and amount.strip("0.,") else ""
    symbol = SYMBOLS.get(currency)
    if symbol is not None:
        return f"{sign}{symbol}{amount}"
    return f"{sign}{currency} {amount}"


def money_unit(value: float | Decimal | None, currency: str) -> str:
    """Unit costs: three decimals below one unit of currency, cents above."""
    if _missing(value):
        return MISSING
    v = float(value)  # type: ignore[arg-type]
    return money(v, currency, places=3 if abs(v) < 1 else 2)


def usd(value: float | Decimal | None, *, places: int = 2) -> str:
    return money(value, "USD", places=places)


def usd_unit(value: float | Decimal | None) -> str:
    return money_unit(value, "USD")


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


def duration(seconds: float | None) -> str:
    """42 s, 17 min, 2 h 13 min, 3 d 4 h; MISSING when unknown."""
    if seconds is None or seconds != seconds:
        return MISSING
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


# Internal names as people read them. The stored and exported values stay as
# they are (finance filters CSVs on them); pages show these.
IDLE_NAME, UNALLOCATED_NAME = "__idle__", "__unallocated__"
FORECAST_METHODS = {
    "ets": "exponential smoothing (ETS), weekly season",
    "ets-nonseasonal": "exponential smoothing (ETS), no season yet",
    "mean": "mean of the days so far",
}


def target_label(name: str) -> str:
    """An allocation target: a deployment's name, a pool's idle, unallocated."""
    if name == IDLE_NAME:
        return "idle (pool node-hours nobody used)"
    if name.endswith("/" + IDLE_NAME):
        return f"pool {name.removesuffix('/' + IDLE_NAME)}: idle"
    if name == UNALLOCATED_NAME:
        return "unallocated (no rule matched)"
    return name


def series_label(scope: str, name: str) -> str:
    """A series: "deployment chat", "team docs", "the fleet" (not "fleet fleet")."""
    return "the fleet" if scope == "fleet" else f"{scope} {name}"


def forecast_method(method: str) -> str:
    return FORECAST_METHODS.get(method, method)
