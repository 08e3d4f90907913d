"""The demo's figures and finance exports as canonical text, for the golden
file that pins behaviour across refactors (tests/economics/test_golden.py).

Daily, weekly and monthly unit-cost figures and the month forecasts are kept
whole, one line each, so a change shows as a readable diff; the hourly and the
idle figures (tens of thousands of lines) as a count, a SHA-256 of their text
with every number masked, and per number position the sum of its values and
their sum weighted by line; the export files as bytes and a SHA-256 (money is
Decimal there, exact on any machine).

Numbers compare within a relative tolerance, never as text: the last bits of
a float move with the numeric stack (numpy's log, the machine's BLAS: an LMDI
part 1 ulp apart on a fresh install), and text rounded to any number of digits
flips where a value sits on a rounding boundary (the hourly digest moved on
two machines that way). Everything else (keys, flags, classes, which figures
are missing) compares exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import models

from costapp.costs.export.build import Export, ExportSpec
from costapp.costs.export.files import csv_rows, summary_csv
from costapp.models import IdleFigure, MonthForecastFigure, UnitCostFigure

# Bookkeeping that says when, not what: never part of the golden text.
WHEN_FIELDS = {"id", "computed_at", "known_since"}


# Significant digits a float is written with. The tolerances below decide
# what counts as a change: 1e-9 of a figure (arithmetic reordered moves the
# last bits, never a figure anyone reads); a month forecast is an ETS fit, an
# optimizer's output that moves further with the machine (by $2 on the point
# and $67 on the bounds of a $206k month between two machines), so 1e-3.
DIGITS = 12
FORECAST_DIGITS = 6
TOLERANCE = 1e-9
FORECAST_TOLERANCE = 1e-3
# A week's sum of ~1,700 figures: 1e-11 of it shows one figure moved by
# 1e-7, and stays far above 12-digit rounding flips (1e-12 of one figure).
SUM_TOLERANCE = 1e-11
PART_TOLERANCE = {
    "month_forecasts": FORECAST_TOLERANCE,
    "unit_cost_figures_hour": SUM_TOLERANCE,
    "idle_figures": SUM_TOLERANCE,
}
# A number in a line: in a cell, inside a JSON cell, or a date's parts.
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?inf|nan")


def _rounded(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return float(format(value, f".{digits}g"))
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def _cell(value: Any, digits: int = DIGITS) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, f".{digits}g")
    if isinstance(value, Decimal):
        return str(value.normalize()) if value == value.to_integral() else str(value)
    if isinstance(value, dict | list):
        return json.dumps(_rounded(value, digits), sort_keys=True, default=_cell)
    return str(value)


def _lines(
    model: type[models.Model], rows: Iterable[models.Model], digits: int = DIGITS
) -> Iterator[str]:
    names = [
        f.attname for f in model._meta.concrete_fields if f.name not in WHEN_FIELDS
    ]
    yield "\t".join(names)
    lines = ["\t".join(_cell(getattr(r, n), digits) for n in names) for r in rows]
    yield from sorted(lines)


def _masked(line: str) -> tuple[str, list[float]]:
    """The line with every number replaced by ``#``, and the numbers."""
    numbers = [float(m) for m in NUMBER.findall(line)]
    return NUMBER.sub("#", line), numbers


def golden_summary(lines: Iterable[str]) -> dict[str, Any]:
    """Count, the masked text's SHA-256, and per ISO week (of the first date
    in the line) and column (``parts:2``: the third number inside a JSON
    cell) the sum of the values and their sum weighted by the line's place,
    which tells a moved figure from two figures swapped. A week's sums (the
    demo's ~1,700 hours) show one figure moved by 1e-7 within SUM_TOLERANCE."""
    header, *rows = lines
    names = header.split("\t")
    h = hashlib.sha256(header.encode() + b"\n")
    sums: dict[str, dict[str, list[float]]] = {}
    masked = sorted((_masked(line)[0], line) for line in rows)
    for k, (text, line) in enumerate(masked, 1):
        h.update(text.encode() + b"\n")
        dated = DATE.search(line)
        week = date.fromisoformat(dated[0]).strftime("%G-W%V") if dated else "-"
        bucket = sums.setdefault(week, {})
        for name, cell in zip(names, line.split("\t"), strict=True):
            for i, v in enumerate(_masked(cell)[1]):
                pair = bucket.setdefault(f"{name}:{i}", [0.0, 0.0])
                pair[0] += v
                pair[1] += k * v
    return {"lines": len(rows), "masked_sha256": h.hexdigest(), "sums": sums}


def _close(a: float, b: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)


def golden_differences(
    found: Any, want: Any, *, tolerance: float = TOLERANCE, where: str = ""
) -> list[str]:
    """Where ``found`` differs from ``want``: numbers (alone or inside
    lines of text) beyond ``tolerance``, relative; anything else at all."""
    if isinstance(want, dict) and isinstance(found, dict):
        if set(found) != set(want):
            return [f"{where}: keys {sorted(set(found) ^ set(want))} differ"]
        return [
            d
            for key in sorted(want)
            for d in golden_differences(
                found[key], want[key], tolerance=tolerance, where=f"{where}.{key}"
            )
        ]
    if isinstance(want, list) and isinstance(found, list):
        if len(found) != len(want):
            return [f"{where}: {len(found)} items, the file has {len(want)}"]
        return [
            d
            for i, (f, w) in enumerate(zip(found, want, strict=True))
            for d in golden_differences(
                f, w, tolerance=tolerance, where=f"{where}[{i}]"
            )
        ]
    if isinstance(want, str) and isinstance(found, str):
        (text_f, numbers_f), (text_w, numbers_w) = _masked(found), _masked(want)
        if text_f == text_w and all(
            _close(f, w, tolerance) for f, w in zip(numbers_f, numbers_w, strict=True)
        ):
            return []
        return [f"{where}:\n  found {found[:400]!r}\n  file  {want[:400]!r}"]
    if isinstance(want, float | int) and isinstance(found, float | int):
        if _close(float(found), float(want), tolerance):
            return []
    elif found == want:
        return []
    return [f"{where}: found {found!r}, the file has {want!r}"]


def _export_bytes(spec: ExportSpec) -> dict[str, Any]:
    export = Export(spec)
    data = "".join(csv_rows(export)).encode()
    summary = "".join(summary_csv(export))
    return {
        "csv_bytes": len(data),
        "csv_sha256": hashlib.sha256(data).hexdigest(),
        "summary": summary.splitlines(),
    }


def demo_golden(*, month_start: date, month_end: date) -> dict[str, Any]:
    """What the golden file holds for the demo as stored now."""
    figures = UnitCostFigure.objects.all()
    whole = list(
        _lines(UnitCostFigure, figures.filter(grain__in=("day", "week", "month")))
    )
    return {
        "unit_cost_figures_day_week": whole,
        "unit_cost_figures_hour": golden_summary(
            _lines(UnitCostFigure, figures.filter(grain="hour"))
        ),
        "idle_figures": golden_summary(_lines(IdleFigure, IdleFigure.objects.all())),
        # As lines, not a digest: a change shows which figure moved and by
        # how much.
        "month_forecasts": list(
            _lines(
                MonthForecastFigure,
                MonthForecastFigure.objects.all(),
                digits=FORECAST_DIGITS,
            )
        ),
        "exports": {
            f"{by}-{basis}": _export_bytes(
                ExportSpec(start=month_start, end=month_end, by=by, basis=basis)
            )
            for by in ("deployment", "team")
            for basis in ("amortized", "unblended")
        },
    }
