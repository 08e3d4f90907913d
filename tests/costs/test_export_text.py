"""The export's fast paths write the same text and figures as the plain ones:
money through ``str`` is ``format(x, "f")``, and a unit cost over a whole
float divides by the same value as over its repr."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from hypothesis import example, given
from hypothesis import strategies as st

from costapp.costs.export_files import money_text
from costapp.costs.export_rows import QUANTUM, THOUSAND, float_decimal

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


floats = st.one_of(
    st.integers(min_value=-(2**60), max_value=2**60).map(float),
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(floats)
@example(float(2**53 - 1))
@example(float(2**53))
@example(1e16)
@example(1e23)
@example(48280.0)
@example(0.1)
def test_a_float_is_the_decimal_of_its_repr(value: float) -> None:
    assert float_decimal(value) == Decimal(repr(value))


@given(money, floats)
@example(Decimal("44.712000000000"), 48280.0)
@example(Decimal("1e14"), 3.0)
def test_a_unit_cost_over_a_whole_float_is_the_same_figure(
    cost: Decimal, value: float
) -> None:
    if not value:
        return
    try:
        expected = (cost * THOUSAND / Decimal(repr(value))).quantize(QUANTUM)
    except InvalidOperation:  # too many digits at 12 places: both refuse
        try:
            (cost * THOUSAND / float_decimal(value)).quantize(QUANTUM)
        except InvalidOperation:
            return
        raise AssertionError("one refused, the other did not") from None
    got = (cost * THOUSAND / float_decimal(value)).quantize(QUANTUM)
    assert str(got) == str(expected)
