"""The unit-economics figures (the overview's cost per 1k requests, a unit
cost against its baseline band): stored figures in, figure JSON (a plain dict)
out, on the shared primitives of ``costapp.charts``.

Pages embed the dict with ``json_script`` and call ``Plotly.newPlot``; nothing
here touches the database or formats money for tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from costapp.charts import (
    PALETTE,
    band_traces,
    base_layout,
    floats_or_null,
    iso_days,
    iso_stamps,
    log_ticks,
    money_hover,
)

SYMBOLS_PREFIX = {"USD": "$"}


def cost_per_1k_daily(frame: pd.DataFrame) -> dict[str, Any]:
    """One line per deployment: daily $ per 1k requests."""
    traces = []
    for i, (name, rows) in enumerate(frame.sort_values("day").groupby("deployment")):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": str(name),
                "x": iso_days(rows["day"]),
                "y": floats_or_null(rows["cost_per_1k_requests"]),
                "line": {"width": 2, "color": PALETTE[i % len(PALETTE)]},
                "hovertemplate": "%{y:$,.3f} per 1k<extra>%{fullData.name}</extra>",
                "connectgaps": False,
            }
        )
    layout = base_layout(
        "Cost per 1k requests, daily", "$ per 1k requests (log)", tickprefix="$"
    )
    # Deployments differ by two orders of magnitude: a log axis keeps each
    # line's movement visible.
    layout["yaxis"]["type"] = "log"
    layout["yaxis"].update(log_ticks(frame["cost_per_1k_requests"]))
    return {"data": traces, "layout": layout}


def baseline_band(
    rows: Sequence[Any],
    *,
    title: str,
    currency: str = "USD",
    field: str = "cost_per_1k_requests",
) -> dict[str, Any]:
    """A unit cost against its EWMA baseline and band, flagged periods marked.

    ``rows``: stored figures (``FigureRow``) of one series, in period order.
    ``field``: ``cost_per_1k_requests`` or ``cost_per_1m_tokens`` (its own
    baseline and band, from the same EWMA state). Weeks and months carry a
    baseline and no band.
    """
    suffix = "_per_1m_tokens" if field == "cost_per_1m_tokens" else ""
    low, high, mid = f"lower{suffix}", f"upper{suffix}", f"baseline{suffix}"
    x = iso_stamps(r.period_start for r in rows)
    symbol = SYMBOLS_PREFIX.get(currency, f"{currency} ")
    flagged = [r for r in rows if r.flag]
    colours = {"anomaly": PALETTE[4], "traffic": PALETTE[2], "size": PALETTE[1]}
    traces: list[dict[str, Any]] = [
        *band_traces(
            x,
            floats_or_null(getattr(r, low) for r in rows),
            floats_or_null(getattr(r, high) for r in rows),
            name="band",
            fillcolor="rgba(37,99,235,0.12)",
        ),
        {
            "type": "scatter", "mode": "lines", "name": "baseline",
            "x": x, "y": floats_or_null(getattr(r, mid) for r in rows),
            "line": {"dash": "dot", "color": PALETTE[8], "width": 1.5},
            "connectgaps": False, "hovertemplate": money_hover(currency),
        },
        {
            "type": "scatter", "mode": "lines+markers", "name": "actual",
            "x": x, "y": floats_or_null(getattr(r, field) for r in rows),
            "line": {"color": PALETTE[0], "width": 2}, "marker": {"size": 3},
            "connectgaps": False, "hovertemplate": money_hover(currency),
        },
    ]  # fmt: skip
    partial = [r for r in rows if not r.complete]
    if partial:
        # The period in progress: its figure will move; it is never judged.
        traces.append(
            {
                "type": "scatter", "mode": "markers", "name": "partial (not closed)",
                "x": iso_stamps(r.period_start for r in partial),
                "y": floats_or_null(getattr(r, field) for r in partial),
                "marker": {"size": 9, "color": PALETTE[7], "symbol": "diamond-open",
                           "line": {"width": 2}},
                "hovertemplate": "%{x}: partial, not closed yet (not judged)"
                                 "<extra></extra>",
            }
        )  # fmt: skip
    for flag, colour in colours.items():
        these = [r for r in flagged if r.flag == flag]
        if these:
            traces.append(
                {
                    "type": "scatter", "mode": "markers", "name": f"flag: {flag}",
                    "x": iso_stamps(r.period_start for r in these),
                    "y": floats_or_null(getattr(r, field) for r in these),
                    "marker": {"size": 9, "color": colour, "symbol": "circle-open",
                               "line": {"width": 2}},
                    "text": [r.cause for r in these],
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )  # fmt: skip
    layout = base_layout(
        title,
        "per 1M tokens" if suffix else "per 1k requests",
        tickprefix=symbol.strip() if currency == "USD" else "",
    )
    return {"data": traces, "layout": layout}
