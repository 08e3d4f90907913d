"""The demo's figures and finance exports as canonical text, for the golden
file that pins behaviour across refactors (tests/economics/test_golden.py).

Daily, weekly and monthly unit-cost figures are kept whole, one line each, so a
change shows as a readable diff; the hourly figures, the idle figures, the
month forecasts and the export files as a count and a SHA-256 of the same
canonical text (they are tens of thousands of lines). Floats are written to
12 significant digits: a refactor that reorders a sum may move the last
bits of a double, never a figure anyone reads.
"""

from __future__ import annotations

import hashlib
import json
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


# Significant digits kept of a float, in cells and inside JSON alike. The
# last bits of a float move with the numeric stack (numpy's log, the BLAS of
# the machine: an LMDI part 1 ulp apart on a fresh install), so arithmetic is
# pinned to 12 digits. A month forecast is an ETS fit, an optimizer's output
# that moves further, so it is pinned to 6 (under a dollar on a $200k month).
DIGITS = 12
FORECAST_DIGITS = 6


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


def _digest(lines: Iterable[str]) -> dict[str, Any]:
    h = hashlib.sha256()
    count = 0
    for line in lines:
        h.update(line.encode())
        h.update(b"\n")
        count += 1
    return {"lines": count, "sha256": h.hexdigest()}


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
        "unit_cost_figures_hour": _digest(
            _lines(UnitCostFigure, figures.filter(grain="hour"))
        ),
        "idle_figures": _digest(_lines(IdleFigure, IdleFigure.objects.all())),
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
