"""The CSV's fast money text is the one writer's: ``str`` where it has no
exponent is ``format(x, "f")``, and so is PostgreSQL's text of the amount as
``numeric(28, 12)``, which the CSV reads stored rows by."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import strategies as st

from costapp.costs.export.rows import QUANTUM, money_text

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


@pytest.mark.django_db
def test_postgresql_text_of_a_stored_amount_is_the_csv_text(
    postgres_only: None,
) -> None:
    rng = random.Random(20261203)
    values = [Decimal(0), Decimal("1e-12"), Decimal("-1e-12"), Decimal("0.000001"),
              Decimal("0.0000009"), Decimal("-12.5"), Decimal("9999999999999999.999999999999")]  # fmt: skip
    for _ in range(500):
        digits = rng.randint(1, 28)
        coefficient = rng.randrange(10 ** (digits - 1), 10**digits)
        values.append(Decimal(rng.choice((1, -1)) * coefficient).scaleb(-12))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT v::numeric(28, 12)::text FROM unnest(%s::numeric[]) AS v",
            [[str(v) for v in values]],
        )
        texts = [t for (t,) in cursor.fetchall()]
    assert texts == [money_text(v.quantize(QUANTUM)) for v in values]


def test_gpu_hours_summed_over_days_read_as_measured_not_as_float_noise() -> None:
    from datetime import date

    from costapp.costs.export.rows import ExportRow, row_values

    row = ExportRow(date(2026, 11, 1), "1", "USD", "chat", "", "final")
    for _ in range(3):  # three days of 0.1 GPU-hours
        row.add_traffic(Decimal("0.1"), Decimal(1000), 24, 1.0, 1.0)
    assert repr(row.gpu_hours) == "0.30000000000000004"  # the float sum
    values = row_values(row, "amortized", 3)
    assert repr(values[17]) == "0.3"  # the CSV's and Parquet's cell
