"""The CSV's fast money text is the one writer's: ``str`` where it has no
exponent is ``format(x, "f")``."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import example, given
from hypothesis import strategies as st

from costapp.costs.export_files import money_text
from costapp.costs.export_rows import QUANTUM

# Money as the export holds it: numeric(28, 12), any sign, zero included.
money = st.decimals(
    min_value=Decimal("-1e15"),
    max_value=Decimal("1e15"),
    places=12,
    allow_nan=False,
    allow_infinity=False,
)


@given(money)
@example(Decimal("0E-12"))
@example(Decimal("-0E-12"))
@example(Decimal("0.000000999999"))
@example(Decimal("0.000001000000"))
def test_money_text_is_the_fixed_point_text_of_the_one_writer(value: Decimal) -> None:
    quantized = value.quantize(QUANTUM)
    assert money_text(quantized) == format(quantized, "f")
    assert "E" not in money_text(quantized)


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_money_text_is_format_f_for_any_decimal(value: Decimal) -> None:
    assert money_text(value) == format(value, "f")
    assert money_text(None) == ""
