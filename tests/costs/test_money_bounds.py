"""Issue 28: amounts an attacker cannot poison the database with.

SQLite keeps a decimal as a REAL and Django reads it back rounded to 15
significant digits, then to the column's 12 places within 28 digits: an
amount of 9999999999999999.999999999999 came back as 1e16 (29 digits) and
every page reading that month answered 500. Amounts stay below 10^15; these
tests run on SQLite too (``smoke``)."""

from __future__ import annotations

from decimal import Context, Decimal
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from analytics.errors import InvalidInput
from costapp.models import CostLine, IngestRun
from costapp.validation import decimal_in, looks_numeric
from tests.costs.conftest import utc
from tests.costs.test_focus import import_file, sample_rows, write_csv
from tests.support.users import user_in

D = Decimal
FULL_WIDTH = "\uff11\uff12\uff13"  # 123 in full-width digits
ARABIC_INDIC = "\u0661\u0662\u0663"  # 123 in Arabic-Indic digits
PAGES = ("/costs/", "/costs/reconciliation/", "/costs/breakdown/")
MONTH = {"start": "2024-09-01", "end": "2024-10-01"}


def one_row(tmp_path: Path, **cells: str) -> Path:
    """A one-row FOCUS file: the sample's first row with ``cells`` changed."""
    row = sample_rows()[0]
    row.update(cells)
    return write_csv(tmp_path / "one.csv", [row])


# -- the input layer, no database ------------------------------------------------


@pytest.mark.smoke
@pytest.mark.parametrize(
    "value",
    [
        "9999999999999999.999999999999",
        "1000000000000000",
        "1e15",
        "-1000000000000000.00",
        D(10) ** 15,
        10**15,
        1e15,
    ],
)
def test_an_amount_of_10_to_the_15_or_more_is_refused_naming_the_bound(
    value: object,
) -> None:
    with pytest.raises(InvalidInput) as caught:
        decimal_in(value, field="BilledCost")
    assert str(caught.value) == (
        f"BilledCost={value!r}: is too large: amounts stay below 10^15"
    )


@pytest.mark.smoke
@pytest.mark.parametrize(
    "value",
    ["1_000", "1_000.5", FULL_WIDTH, ARABIC_INDIC, "1\u00a0000", "\u0663.\u0665"],
)
def test_money_in_digits_other_than_ascii_is_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decimal_in(value, field="BilledCost")
    assert str(caught.value).startswith(f"BilledCost={value!r}: is not a")
    assert "decimal number" in str(caught.value)


@pytest.mark.smoke
def test_a_quantity_is_never_negative_and_money_may_be() -> None:
    with pytest.raises(InvalidInput) as caught:
        decimal_in("-2.5", field="ConsumedQuantity", negative=False)
    assert str(caught.value) == (
        "ConsumedQuantity='-2.5': is negative: a quantity or a duration never is"
    )
    assert decimal_in("-2.5", field="BilledCost") == D("-2.5")
    assert decimal_in("0", field="ConsumedQuantity", negative=False) == 0
    assert decimal_in("999999999999999.99", field="x") == D("999999999999999.99")


@pytest.mark.smoke
def test_a_spreadsheet_number_is_ascii_so_other_digits_are_neutralised() -> None:
    from costapp.csv_export import csv_cell

    assert looks_numeric("-1.5e3") and not looks_numeric("-" + ARABIC_INDIC)
    assert csv_cell("-" + ARABIC_INDIC) == "'-" + ARABIC_INDIC
    assert csv_cell("-12.5") == "-12.5"


# -- a FOCUS import --------------------------------------------------------------


@pytest.mark.smoke
@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", ["9999999999999999.999999999999", "1000000000000000", "-1e15"]
)
def test_a_focus_amount_of_10_to_the_15_is_refused_naming_row_column_value_bound(
    tmp_path: Path, value: str
) -> None:
    run = import_file(str(one_row(tmp_path, BilledCost=value)))
    assert run.status == IngestRun.FAILED
    assert (
        f"one.csv row 1, column BilledCost: {value!r} is too large: amounts stay "
        "below 10^15; nothing was imported"
    ) in run.error
    assert not CostLine.objects.exists()


@pytest.mark.smoke
@pytest.mark.django_db
def test_an_amount_just_under_10_to_the_15_is_stored_and_every_page_reads_it(
    client: Client, tmp_path: Path
) -> None:
    from costapp.economics.unit_costs.services import unit_costs_recompute

    value = "999999999999999.99"
    path = one_row(tmp_path, BilledCost=value, EffectiveCost=value, ListCost=value)
    run = import_file(str(path))
    assert run.status == IngestRun.SUCCEEDED, run.error
    line = CostLine.objects.get()
    for stored in (line.billed_cost, line.amortized_cost, line.list_cost):
        if connection.vendor == "postgresql":
            assert stored == D(value)  # numeric(28, 12): to the cent
        else:
            # SQLite holds a REAL: what comes back is the amount to 15
            # significant digits (10^15 here), a cent off, and it reads.
            assert stored == Context(prec=15).create_decimal(D(value))
            assert abs(stored - D(value)) <= D("0.01")
    person = user_in("lead", "tech lead", "admin")
    person.is_staff = True
    person.save()
    client.force_login(person)
    for url in PAGES:
        page = client.get(url, MONTH)
        assert page.status_code == 200, url
    assert client.get("/admin/costapp/costline/").status_code == 200
    unit_costs_recompute(now=utc(2024, 10, 2))


@pytest.mark.smoke
@pytest.mark.django_db
def test_an_amount_of_15_significant_digits_reads_back_exactly_on_any_database(
    tmp_path: Path,
) -> None:
    value = "9999999999999.99"
    run = import_file(str(one_row(tmp_path, BilledCost=value)))
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert CostLine.objects.get().billed_cost == D(value)


@pytest.mark.smoke
@pytest.mark.django_db
def test_rows_adding_up_past_10_to_the_15_are_refused_at_the_row_that_does_it(
    tmp_path: Path,
) -> None:
    """Each row is below the bound; their day's line would not be."""
    rows = [sample_rows()[0] for _ in range(3)]
    for row in rows:
        row["BilledCost"] = "400000000000000"
    run = import_file(str(write_csv(tmp_path / "sum.csv", rows)))
    assert run.status == IngestRun.FAILED
    assert "sum.csv row 3, column BilledCost: '400000000000000' brings" in run.error
    assert "amounts stay below 10^15" in run.error
    assert not CostLine.objects.exists()


@pytest.mark.smoke
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("BilledCost", "1_000", "is not a plain decimal number"),
        ("EffectiveCost", FULL_WIDTH, "is not a plain decimal number"),
        ("ListCost", ARABIC_INDIC, "is not a plain decimal number"),
        ("ConsumedQuantity", "1_000", "is not a plain decimal number"),
        ("ConsumedQuantity", "-3", "is negative"),
        ("PricingQuantity", "-0.5", "is negative"),
        ("PricingQuantity", "1e15", "is too large: amounts stay below 10^15"),
        ("ChargePeriodEnd", "2024-09-18 21:00:00", "is before ChargePeriodStart"),
    ],
)
def test_a_focus_value_no_bill_means_is_refused_naming_column_and_value(
    tmp_path: Path, column: str, value: str, reason: str
) -> None:
    run = import_file(str(one_row(tmp_path, **{column: value})))
    assert run.status == IngestRun.FAILED
    assert f"one.csv row 1, column {column}: {value!r} {reason}" in run.error
    assert not CostLine.objects.exists()


@pytest.mark.smoke
@pytest.mark.django_db
def test_a_credit_rows_quantity_is_not_counted_so_its_sign_does_not_matter(
    tmp_path: Path,
) -> None:
    """FOCUS: ConsumedQuantity is null unless the row is usage."""
    usage = sample_rows()[0]
    usage["ConsumedQuantity"] = usage["PricingQuantity"] = "2"
    credit = dict(usage, ChargeCategory="Credit", BilledCost="-1")
    credit["ConsumedQuantity"] = credit["PricingQuantity"] = "-2"
    run = import_file(str(write_csv(tmp_path / "two.csv", [usage, credit])))
    assert run.status == IngestRun.SUCCEEDED, run.error
    quantities = dict(CostLine.objects.values_list("record_type", "usage_quantity"))
    assert quantities == {"usage": D(2), "credit": D(0)}


@pytest.mark.smoke
@pytest.mark.django_db
def test_a_usage_correction_may_take_usage_back(tmp_path: Path) -> None:
    """FOCUS ChargeClass "Correction": a row correcting an earlier period may
    carry a negative quantity; an ordinary usage row may not (above)."""
    usage = sample_rows()[0]
    usage["ConsumedQuantity"] = usage["PricingQuantity"] = "5"
    fix = dict(usage, ChargeClass="Correction", BilledCost="-1")
    fix["ConsumedQuantity"] = fix["PricingQuantity"] = "-2"
    run = import_file(str(write_csv(tmp_path / "fix.csv", [usage, fix])))
    assert run.status == IngestRun.SUCCEEDED, run.error
    total = sum(CostLine.objects.values_list("usage_quantity", flat=True))
    assert total == D(3)
