"""The one CSV writer every export uses: formula injection neutralised.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a
formula, and some also after a leading tab or carriage return (OWASP "CSV
injection"). Account ids from a FOCUS file, deployment and scenario names are
user-controlled, so such a cell gets a leading ``'`` and is shown as text.
Numbers stay numbers: a Decimal is written at its stored precision (``format(x,
"f")``, so a spreadsheet sum reconciles exactly) and a text cell that is a
plain number such as ``-1.5`` is left as it is.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from costapp.validation import looks_numeric

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """One cell as text, safe to open in a spreadsheet."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    text = str(value)
    if text.startswith(FORMULA_STARTS) and not looks_numeric(text):
        return "'" + text
    return text


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """The CSV as lines, one at a time (for a StreamingHttpResponse)."""
    writer = csv.writer(_Echo())
    yield writer.writerow([csv_cell(h) for h in header])
    for row in rows:
        yield writer.writerow([csv_cell(v) for v in row])


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The whole CSV as one string."""
    return "".join(csv_lines(header, rows))
