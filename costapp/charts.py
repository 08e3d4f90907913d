"""Chart primitives every area's plotly figures share: the palette, the font,
the base layout, values as plotly wants them and the shaded band.

A leaf below the areas: economics, telemetry and the deployment page build
their figures on it, and it imports nothing of theirs, so no area reaches
into another for a colour.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

import pandas as pd

PALETTE = (
    "#2563eb", "#d97706", "#059669", "#7c3aed", "#dc2626", "#0891b2", "#65a30d",
    "#db2777", "#475569", "#ca8a04",
)  # fmt: skip
FONT = {"family": 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif'}
GRID = "#eef2f7"


def floats_or_null(values: Iterable[Any]) -> list[float | None]:
    """NaN and None become null, so plotly draws a gap (missing is not zero)."""
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        f = float(v)
        out.append(None if math.isnan(f) else f)
    return out


def iso_days(values: Iterable[date]) -> list[str]:
    return [d.isoformat() for d in values]


def iso_stamps(values: Iterable[Any]) -> list[str]:
    return [pd.Timestamp(v).strftime("%Y-%m-%dT%H:%M:%SZ") for v in values]


def money_hover(currency: str, places: int = 4) -> str:
    """A hover line for an amount on a money axis: the currency and fixed
    places, never plotly's raw float ("$2.363806")."""
    prefix = "$" if currency == "USD" else f"{currency} "
    return f"{prefix}%{{y:,.{places}f}}<extra>%{{fullData.name}}</extra>"


def with_marks(figure: dict[str, Any], marks: Sequence[Any]) -> dict[str, Any]:
    """``figure`` with a dashed vertical line and a label per dated mark
    (``.day``, ``.text``: a rate-card change, a deployment's first hour), so
    a step in a line says what happened that day."""
    layout = figure["layout"]
    shapes = list(layout.get("shapes", []))
    notes = list(layout.get("annotations", []))
    for mark in marks:
        day = mark.day.isoformat()
        shapes.append(
            {"type": "line", "xref": "x", "yref": "paper", "x0": day, "x1": day,
             "y0": 0, "y1": 1, "line": {"color": PALETTE[8], "width": 1, "dash": "dash"}}
        )  # fmt: skip
        notes.append(
            {"x": day, "xref": "x", "y": 1, "yref": "paper", "yanchor": "bottom",
             "text": mark.text, "showarrow": False, "font": {"size": 10},
             "textangle": 0, "xanchor": "left", "name": "mark"}
        )  # fmt: skip
    layout["shapes"], layout["annotations"] = shapes, notes
    return figure


def base_layout(
    title: str, y_title: str, *, tickprefix: str = "", **extra: Any
) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "font": FONT,
        "margin": {"l": 64, "r": 16, "t": 44, "b": 40},
        "height": 320,
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.15},
        "xaxis": {"type": "date", "gridcolor": GRID},
        "yaxis": {
            "title": {"text": y_title},
            "tickprefix": tickprefix,
            "rangemode": "tozero",
            "gridcolor": GRID,
        },
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
    }
    layout.update(extra)
    return layout


def log_ticks(values: Iterable[Any]) -> dict[str, Any]:
    """1-2-5 ticks labelled in dollars across the data's range."""
    finite = [v for v in floats_or_null(values) if v is not None and v > 0]
    if not finite:
        return {}
    low, high = min(finite), max(finite)
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for m in (1, 2, 5):
            tick = m * 10.0**exponent
            if low / 2.5 <= tick <= high * 2.5:
                ticks.append(tick)
    return {
        "tickvals": ticks,
        "ticktext": [f"${t:,.2f}" if t >= 0.1 else f"${t:.3g}" for t in ticks],
        "tickprefix": "",
    }


# More stretches than this and only the longest get their band (a trace pair
# each): a gappy gauge over years would otherwise ship thousands of traces.
MAX_BAND_RUNS = 50


def band_traces(
    x: Sequence[Any],
    low: Sequence[float | None],
    high: Sequence[float | None],
    *,
    name: str,
    fillcolor: str,
    **extra: Any,
) -> list[dict[str, Any]]:
    """The shaded range between ``low`` and ``high``: one pair of traces per
    stretch of points where both are known, the upper filling down to its own
    lower (``tonexty``).

    One pair over the whole series draws wedges: plotly fills a segment after
    a gap towards the previous trace's whole path, so a day without a band
    (a holiday the baseline skips) drew a detached triangle on the overview.
    A stretch of one point shades nothing and is left out. ``extra`` goes on
    every trace (an axis, a hover setting)."""
    runs: list[tuple[int, int]] = []
    i, n = 0, len(x)
    while i < n:
        if low[i] is None or high[i] is None:
            i += 1
            continue
        j = i
        while j < n and low[j] is not None and high[j] is not None:
            j += 1
        if j - i > 1:
            runs.append((i, j))
        i = j
    if len(runs) > MAX_BAND_RUNS:
        longest = sorted(runs, key=lambda r: r[0] - r[1])[:MAX_BAND_RUNS]
        runs = sorted(longest)
    invisible = {"width": 0, "color": "rgba(0,0,0,0)"}
    traces: list[dict[str, Any]] = []
    for k, (a, b) in enumerate(runs):
        common = {"type": "scatter", "mode": "lines", "x": list(x[a:b]),
                  "line": invisible, "hoverinfo": "skip", "legendgroup": name,
                  "connectgaps": False, **extra}  # fmt: skip
        traces.append(
            {**common, "name": f"{name} (low)", "y": list(low[a:b]),
             "showlegend": False}
        )  # fmt: skip
        traces.append(
            {**common, "name": name, "y": list(high[a:b]), "fill": "tonexty",
             "fillcolor": fillcolor, "showlegend": k == 0}
        )  # fmt: skip
    return traces
