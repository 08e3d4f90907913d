from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costapp import formatting as fmt


def test_money_writes_dollars_with_a_symbol_and_others_with_their_code() -> None:
    assert fmt.money(1234.5, "USD") == "$1,234.50"
    assert fmt.money(Decimal("-3.1"), "USD") == "-$3.10"
    assert fmt.money(1234.5, "EUR") == "EUR 1,234.50"
    assert fmt.money(-0.125, "EUR", places=3) == "-EUR 0.125"


def test_a_missing_amount_reads_as_missing_in_any_currency() -> None:
    assert fmt.money(None, "EUR") == fmt.MISSING
    assert fmt.money(math.nan, "USD") == fmt.MISSING
    assert fmt.money_unit(None, "EUR") == fmt.MISSING


def test_an_amount_without_a_currency_is_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match="currency = ''"):
        fmt.money(1.0, "")


def test_unit_costs_keep_three_decimals_below_one_unit_and_cents_above() -> None:
    assert fmt.money_unit(0.12345, "EUR") == "EUR 0.123"
    assert fmt.money_unit(12.345, "EUR") == "EUR 12.35"
    assert fmt.usd_unit(0.12345) == "$0.123"


@given(st.floats(allow_nan=False, allow_infinity=False, width=32), st.integers(0, 4))
def test_usd_is_money_in_dollars_as_it_was_written_before(
    value: float, places: int
) -> None:
    amount = f"{abs(value):,.{places}f}"
    # As before, except that what rounds to nothing has no minus sign.
    sign = "-" if value < 0 and float(amount.replace(",", "")) != 0 else ""
    assert fmt.usd(value, places=places) == f"{sign}${amount}"
    assert fmt.usd(value, places=places) == fmt.money(value, "USD", places=places)


def test_an_amount_that_rounds_to_nothing_carries_no_minus_sign() -> None:
    assert fmt.money(-0.0004, "USD", places=3) == "$0.000"
    assert fmt.money(-0.0, "EUR") == "EUR 0.00"
    assert fmt.money(-0.0006, "USD", places=3) == "-$0.001"


def test_internal_names_read_as_words_on_pages() -> None:
    from costapp.formatting import forecast_method, series_label, target_label

    assert target_label("__idle__") == "idle (pool node-hours nobody used)"
    assert target_label("p5-chat/__idle__") == "pool p5-chat: idle"
    assert target_label("__unallocated__") == "unallocated (no rule matched)"
    assert target_label("chat") == "chat"
    assert series_label("fleet", "fleet") == "the fleet"
    assert series_label("team", "docs") == "team docs"
    assert forecast_method("ets").startswith("exponential smoothing")
    assert forecast_method("something new") == "something new"
