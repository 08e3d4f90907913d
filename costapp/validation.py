"""One input layer for values that come from outside: forms, commands, files.

Every check returns the clean value or raises the product's one input error,
``analytics.errors.InvalidInput(field, value, reason)``; the message names the
field and the value (cut to 80 characters, so a 10 kB string never floods a
page or a log). The limits are the ones the database and the pages can hold,
with the reason beside each:

- numbers are finite (NaN, ±Infinity and ``1e309``, which a float reads as
  infinity, are refused) and amounts ``|x| < 10^15``: money columns are
  ``DECIMAL(28, 12)`` (16 integer digits), but SQLite keeps a decimal as a REAL
  (about 15 significant digits) and Django reads it back rounded to 15 digits,
  then to 12 places within 28 digits: 9999999999999999.999999999999 came back
  as 1e16, 29 digits, and every page reading it failed. Below 10^15 a value
  rounds to at most 10^15, which reads back; the tenfold room is for sums;
- money is written in ASCII digits (``Decimal`` and ``float`` also read
  ``1_000``, full-width and Arabic-Indic digits, which no bill means);
- at most 12 decimal places, the column's scale: more would be rounded silently;
- no NUL byte in any text: PostgreSQL text cannot hold one, and some readers
  cut the string there (an account id "1234\\x005678" became "1234");
- AWS account ids are exactly 12 ASCII digits (``str.isdigit`` accepts
  full-width and other Unicode digits);
- dates between 2000-01-01 and 2100-12-31: nothing costapp reads is older than
  cloud billing, and year 9999 or year 1 overflow date arithmetic downstream;
- JSON at most 20 levels deep, integers within Python's digit limit.

This module imports nothing of Django, so commands, file readers and forms
share it; forms turn ``InvalidInput`` into a field error with ``str(exc)``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from analytics.errors import InvalidInput, shown

MAX_MAGNITUDE = Decimal(10) ** 15
MAX_PLACES = 12
# What "YYYY-MM-DD" means everywhere: ASCII digits (fromisoformat alone also
# takes 20261101 and the ISO week date 2026-W48-1, which nobody means).
ISO_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
MIN_DATE = date(2000, 1, 1)
MAX_DATE = date(2100, 12, 31)
MAX_JSON_DEPTH = 20
MAX_NUMBER_CHARS = 64  # longer than any amount a bill can hold
DEFAULT_TEXT_CHARS = 1000
ACCOUNT_ID = re.compile(r"[0-9]{12}")
# What a person types: ASCII digits only. Decimal(), float() and int() also
# read "1_000", full-width and Arabic-Indic digits, which nobody means as a figure.
PLAIN_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
NON_FINITE = frozenset({"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity",
                        "+infinity", "-infinity"})  # fmt: skip

Primitive = str | int | float | bool | None


# What a name may not hold (a channel, rule, team or deployment name, any
# one-line input): a line break puts a header of its own into an email
# ("a\r\nBcc: x") or a fake line into a log or a chat message; other C0/C1
# controls (tab, escape) and the Unicode line separators do the same to what
# reads them; a bidi override or isolate shows a name in another order than
# it is stored (CVE-2021-42574, "Trojan Source"). Free text (a description, a
# comment, a textarea) keeps its tabs and line breaks, never the rest.
_LINE_BREAKS = "\n\r\u2028\u2029"
_BIDI = "\u202a-\u202e\u2066-\u2069"
_NOT_IN_NAMES = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
# Free text keeps tab, LF and CR (and U+2028/U+2029).
_NOT_IN_TEXT = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}]")


def _control_problem(value: str, refused: re.Pattern[str]) -> str | None:
    found = refused.search(value)
    if found is None:
        return None
    char = found.group()
    code = f"U+{ord(char):04X}"
    if char == "\x00":
        return "contains a NUL byte"
    if char in _LINE_BREAKS:
        return f"contains a line break ({code})"
    if re.fullmatch(f"[{_BIDI}]", char):
        return f"contains a bidirectional control ({code})"
    return f"contains a control character ({code})"


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a name (None: it can): no control character
    (C0, C1, DEL; tab and line breaks included), no U+2028/U+2029, no bidi
    override or isolate (U+202A-U+202E, U+2066-U+2069). The one rule of the
    forms (costapp/forms.py), the fleet file and the admin."""
    return _control_problem(value, _NOT_IN_NAMES)


def free_text_problem(value: str) -> str | None:
    """``name_problem`` for free text (a description, a comment, a list one
    item a line): tab, CR and LF are kept, and U+2028/U+2029."""
    return _control_problem(value, _NOT_IN_TEXT)


# -- numbers ------------------------------------------------------------------


def bound(limit: Decimal | float) -> str:
    """A limit as a refusal names it: 10^15 rather than 1E+15."""
    number = Decimal(limit) if isinstance(limit, int | float) else limit
    sign, digits, exponent = number.normalize().as_tuple()
    if not sign and digits == (1,) and isinstance(exponent, int) and exponent > 3:
        return f"10^{exponent}"
    return f"{number:,}"


def _number_text(value: str | bytes, *, field: str, original: Any, kind: str) -> str:
    """The text of a number as written, refused unless it is plain ASCII."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidInput(
            field, original, f"is longer than {MAX_NUMBER_CHARS} characters"
        )
    if text.lower() in NON_FINITE:
        raise InvalidInput(field, original, "is not a finite number")
    if not PLAIN_NUMBER.fullmatch(text):
        raise InvalidInput(field, original, kind)
    return text


def _python_reads(value: str | bytes) -> bool:
    """Whether Decimal() would read it (full-width digits, ``1_000``)."""
    try:
        Decimal(value.decode() if isinstance(value, bytes) else value)
    except (InvalidOperation, ValueError, UnicodeDecodeError):
        return False
    return True


def decimal_in(
    value: Any,
    *,
    field: str,
    max_places: int = MAX_PLACES,
    limit: Decimal = MAX_MAGNITUDE,
    negative: bool = True,
) -> Decimal:
    """A finite Decimal with ``|x| < limit`` and at most ``max_places``
    decimals (trailing zeros do not count: Parquet's decimal128(38, 15) writes
    1.5 as 1.500000000000000); ``negative=False`` for a quantity or a duration.
    Text must be plain ASCII: ``1_000`` and full-width digits are refused."""
    if isinstance(value, bool):
        raise InvalidInput(field, value, "is not a number")
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(field, value, "is not a finite number")
        number = Decimal(repr(value))
    elif isinstance(value, str | bytes):
        try:
            text = _number_text(
                value, field=field, original=value, kind="is not a decimal number"
            )
        except InvalidInput as exc:
            if exc.reason != "is not a decimal number" or not _python_reads(value):
                raise
            raise InvalidInput(
                field,
                value,
                "is not a plain decimal number: ASCII digits only, no _ separators",
            ) from None
        try:
            number = Decimal(text)
        except (InvalidOperation, ValueError):
            raise InvalidInput(field, value, "is not a decimal number") from None
    else:
        raise InvalidInput(field, value, "is not a number")
    if not number.is_finite():
        raise InvalidInput(field, value, "is not a finite number")
    # Count the places by hand: normalize() rounds to the context's 28
    # digits, so 16 integer digits and 14 places passed as 12 places.
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    if -exponent > max_places:  # trailing zeros do not count
        zeros = 0
        for digit in reversed(digits):
            if digit:
                break
            zeros += 1
        places = -exponent - zeros if zeros < len(digits) else 0
        if places > max_places:
            raise InvalidInput(
                field, value, f"has more than {max_places} decimal places"
            )
    if abs(number) >= limit:
        raise InvalidInput(
            field, value, f"is too large: amounts stay below {bound(limit)}"
        )
    if not negative and number < 0:
        raise InvalidInput(
            field, value, "is negative: a quantity or a duration never is"
        )
    return number


def float_in(value: Any, *, field: str, limit: float = 1e16) -> float:
    """A finite float with ``|x| < limit``; text must be a plain ASCII number.

    Not for amounts that are stored as decimals (``decimal_in`` bounds those
    at 10^15); alert thresholds are floats and keep their own bound."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise InvalidInput(field, value, "is not a number")
    if isinstance(value, str):
        _number_text(
            value,
            field=field,
            original=value,
            kind="is not a plain number (ASCII digits, such as 1.5)",
        )
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise InvalidInput(field, value, "is not a number") from None
    if not math.isfinite(number):
        raise InvalidInput(field, value, "is not a finite number")
    if abs(number) >= limit:
        raise InvalidInput(
            field, value, f"is too large: the magnitude must stay below {bound(limit)}"
        )
    return number


def int_in(value: Any, *, field: str, minimum: int, maximum: int) -> int:
    """An integer within ``minimum..maximum``; the digits are checked before
    the conversion, so ``10^5000`` costs nothing."""
    if isinstance(value, bool):
        raise InvalidInput(field, value, "is not an integer")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 20 or not re.fullmatch(r"[+-]?[0-9]+", text):
            raise InvalidInput(
                field, value, f"is not an integer between {minimum} and {maximum}"
            )
        number = int(text)
    elif isinstance(value, int):
        number = value
    else:
        raise InvalidInput(field, value, "is not an integer")
    if not minimum <= number <= maximum:
        raise InvalidInput(field, value, f"is not between {minimum} and {maximum}")
    return number


def looks_numeric(text: str) -> bool:
    """Whether ``text`` is a plain decimal number such as -1.5 or 2e3, in
    ASCII digits (a spreadsheet reads "-١٢٣" as a formula, not a number)."""
    return bool(PLAIN_NUMBER.fullmatch(text.strip()))


# -- text ---------------------------------------------------------------------


def text_in(
    value: Any,
    *,
    field: str,
    max_length: int = DEFAULT_TEXT_CHARS,
    required: bool = False,
) -> str:
    """Text without NUL bytes, at most ``max_length`` characters."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput(field, value, "is not text")
    if "\x00" in value:
        raise InvalidInput(field, value, "contains a NUL byte")
    if len(value) > max_length:
        raise InvalidInput(
            field, value, f"is {len(value)} characters long; at most {max_length}"
        )
    if required and not value.strip():
        raise InvalidInput(field, value, "is required")
    return value


def account_id_in(value: Any, *, field: str = "account_id") -> str:
    """A 12-digit AWS account id, ASCII digits only."""
    text = text_in(value, field=field, max_length=32).strip()
    if not ACCOUNT_ID.fullmatch(text):
        raise InvalidInput(field, value, "is not a 12-digit AWS account id")
    return text


def filename_in(value: Any, *, field: str = "file", max_length: int = 200) -> str:
    """A file's name as sent by a browser or named in a URI."""
    text = text_in(value, field=field, max_length=max_length, required=True)
    if "/" in text or "\\" in text or text in {".", ".."}:
        raise InvalidInput(field, value, "is not a plain file name")
    return text


# -- dates --------------------------------------------------------------------


def date_in(
    value: Any,
    *,
    field: str,
    earliest: date = MIN_DATE,
    latest: date = MAX_DATE,
) -> date:
    """A date between ``earliest`` and ``latest`` (inclusive)."""
    if isinstance(value, datetime):
        day = value.astimezone(UTC).date() if value.tzinfo else value.date()
    elif isinstance(value, date):
        day = value
    elif isinstance(value, str) and ISO_DAY.fullmatch(value.strip()):
        try:
            day = date.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(field, value, "is not a date (YYYY-MM-DD)") from None
    else:
        raise InvalidInput(field, value, "is not a date (YYYY-MM-DD)")
    if not earliest <= day <= latest:
        raise InvalidInput(
            field, value, f"is outside the supported range {earliest}..{latest}"
        )
    return day


def datetime_in(
    value: Any,
    *,
    field: str,
    earliest: date = MIN_DATE,
    latest: date = MAX_DATE,
) -> datetime:
    """An aware UTC datetime (a naive one is read as UTC) within the range."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(field, value, "is not a date/time") from None
    else:
        raise InvalidInput(field, value, "is not a date/time")
    try:
        moment = (
            moment.replace(tzinfo=UTC)
            if moment.tzinfo is None
            else moment.astimezone(UTC)
        )
    except (OverflowError, ValueError):
        raise InvalidInput(
            field, value, f"is outside the supported range {earliest}..{latest}"
        ) from None
    if not earliest <= moment.date() <= latest:
        raise InvalidInput(
            field, value, f"is outside the supported range {earliest}..{latest}"
        )
    return moment


# -- JSON ---------------------------------------------------------------------


def json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, strings skipped; read
    before parsing, so a 100,000-deep document never reaches the parser."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def json_in(
    value: str | bytes,
    *,
    field: str,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """Parsed JSON, at most ``max_depth`` deep; NaN/Infinity, floats that
    overflow and integers past Python's digit limit are refused."""
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InvalidInput(field, value, "is not UTF-8 text") from None
    else:
        text = value
    if "\x00" in text:
        raise InvalidInput(field, value, "contains a NUL byte")
    depth = json_depth(text)
    if depth > max_depth:
        raise InvalidInput(
            field, value, f"is nested {depth} levels deep; at most {max_depth}"
        )
    digits = sys.get_int_max_str_digits() or 4300

    def parse_int(raw: str) -> int:
        if len(raw.lstrip("-")) > digits:
            raise InvalidInput(
                field, raw, f"is an integer of {len(raw)} digits; at most {digits}"
            )
        return int(raw)

    def parse_float(raw: str) -> float:
        number = float(raw)
        if not math.isfinite(number):
            raise InvalidInput(field, raw, "is not a finite number")
        return number

    def parse_constant(raw: str) -> float:
        raise InvalidInput(field, raw, "is not a finite number")

    try:
        return json.loads(
            text,
            parse_int=parse_int,
            parse_float=parse_float,
            parse_constant=parse_constant,
        )
    except InvalidInput:
        raise
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(field, value, f"is not JSON ({exc})") from None


def flat_object_in(value: Any, *, field: str) -> dict[str, Primitive]:
    """A flat JSON object of primitives (FOCUS key-value format): a string is
    parsed first; nested objects or lists are refused."""
    parsed = json_in(value, field=field) if isinstance(value, str | bytes) else value
    if not isinstance(parsed, Mapping):
        raise InvalidInput(field, value, "is not a JSON object")
    out: dict[str, Primitive] = {}
    for key, item in parsed.items():
        if not isinstance(key, str):
            raise InvalidInput(field, value, f"key {shown(key)} is not text")
        text_in(key, field=f"{field} key", max_length=256)
        if isinstance(item, Mapping | list | tuple):
            raise InvalidInput(
                field,
                value,
                f"key {shown(key)} holds a nested value; tags must be a flat "
                "object of strings, numbers or booleans",
            )
        if isinstance(item, str):
            text_in(item, field=f"{field}[{key}]", max_length=1000)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(field, value, f"key {shown(key)} is not finite")
        elif not isinstance(item, int | float | bool) and item is not None:
            raise InvalidInput(field, value, f"key {shown(key)} is not a primitive")
        out[key] = item
    return out
