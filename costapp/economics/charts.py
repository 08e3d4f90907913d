"""Plotly figure builders: data in, figure JSON (a plain dict) out.

Pages embed the dict with ``json_script`` and call ``Plotly.newPlot``; nothing
here touches the database or formats money for tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

import pandas as pd

PALETTE = (
    "#2563eb", "#d97706", "#059669", "#7c3aed", "#dc2626", "#0891b2", "#65a30d",
    "#db2777", "#475569", "#ca8a04",
)  # fmt: skip
FONT = {"family": 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif'}


def _clean(values: Iterable[Any]) -> list[float | None]:
    """NaN and None become null, so plotly draws a gap (missing is not zero)."""
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        f = float(v)
        out.append(None if math.isnan(f) else f)
    return out


def _days(values: Iterable[date]) -> list[str]:
    return [d.isoformat() for d in values]


def _layout(title: str, y_title: str, *, tickprefix: str = "", **extra: Any) -> dict:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "font": FONT,
        "margin": {"l": 64, "r": 16, "t": 44, "b": 40},
        "height": 320,
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.15},
        "xaxis": {"type": "date", "gridcolor": "#eef2f7"},
        "yaxis": {
            "title": {"text": y_title},
            "tickprefix": tickprefix,
            "rangemode": "tozero",
            "gridcolor": "#eef2f7",
        },
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
    }
    layout.update(extra)
    return layout


def cost_per_1k_daily(frame: pd.DataFrame) -> dict[str, Any]:
    """One line per deployment: daily $ per 1k requests."""
    traces = []
    for i, (name, rows) in enumerate(frame.sort_values("day").groupby("deployment")):
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": str(name),
                "x": _days(rows["day"]),
                "y": _clean(rows["cost_per_1k_requests"]),
                "line": {"width": 2, "color": PALETTE[i % len(PALETTE)]},
                "hovertemplate": "%{y:$,.3f} per 1k<extra>%{fullData.name}</extra>",
                "connectgaps": False,
            }
        )
    layout = _layout("Cost per 1k requests, daily", "$ per 1k requests (log)",
                     tickprefix="$")  # fmt: skip
    # Deployments differ by two orders of magnitude: a log axis keeps each
    # line's movement visible.
    layout["yaxis"]["type"] = "log"
    layout["yaxis"].update(_log_ticks(frame["cost_per_1k_requests"]))
    return {"data": traces, "layout": layout}


def _log_ticks(values: Iterable[Any]) -> dict[str, Any]:
    """1-2-5 ticks labelled in dollars across the data's range."""
    finite = [v for v in _clean(values) if v is not None and v > 0]
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


def unit_costs_daily(frame: pd.DataFrame) -> dict[str, Any]:
    """$ per 1k requests (left axis) and $ per 1M tokens (right axis)."""
    rows = frame.sort_values("day")
    layout = _layout("Unit costs, daily", "$ / 1k requests", tickprefix="$")
    layout["xaxis"]["anchor"] = "y2"
    # Two stacked panels: overlaid axes would draw the two lines on top of
    # each other whenever tokens per request is steady.
    layout["yaxis"]["domain"] = [0.55, 1.0]
    layout["yaxis2"] = {
        "title": {"text": "$ / 1M tokens"},
        "domain": [0.0, 0.45],
        "anchor": "x",
        "tickprefix": "$",
        "rangemode": "tozero",
        "gridcolor": "#eef2f7",
    }
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "$ per 1k requests",
                "x": _days(rows["day"]),
                "y": _clean(rows["cost_per_1k_requests"]),
                "line": {"color": PALETTE[0]},
                "marker": {"size": 4},
            },
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "$ per 1M tokens",
                "x": _days(rows["day"]),
                "y": _clean(rows["cost_per_1m_tokens"]),
                "yaxis": "y2",
                "line": {"color": PALETTE[1]},
                "marker": {"size": 4},
            },
        ],
        "layout": layout,
    }


def requests_by_reason_daily(frame: pd.DataFrame) -> dict[str, Any]:
    rows = frame.sort_values("day")
    x = _days(rows["day"])
    series = (
        ("stop", "requests_stop", PALETTE[2]),
        ("length (truncated)", "requests_length", PALETTE[1]),
        ("abort (not a request; tokens still cost)", "requests_aborted", PALETTE[4]),
    )
    return {
        "data": [
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": _clean(rows[column]),
                "marker": {"color": color},
            }
            for name, column, color in series
        ],
        "layout": _layout(
            "Finished requests by finished_reason, daily", "requests", barmode="stack"
        ),
    }


def capacity_daily(frame: pd.DataFrame) -> dict[str, Any]:
    rows = frame.sort_values("day")
    layout = _layout("Measured GPU-hours and replicas, daily", "GPU-hours")
    layout["yaxis2"] = {
        "title": {"text": "replicas (mean)"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "showgrid": False,
    }
    layout["margin"]["r"] = 64
    return {
        "data": [
            {
                "type": "bar",
                "name": "GPU-hours",
                "x": _days(rows["day"]),
                "y": _clean(rows["gpu_hours"]),
                "marker": {"color": "#93c5fd"},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "replicas",
                "x": _days(rows["day"]),
                "y": _clean(rows["replicas_mean"]),
                "yaxis": "y2",
                "line": {"color": PALETTE[3]},
            },
        ],
        "layout": layout,
    }


def latency_daily(
    ttft: Mapping[date, Sequence[float | None]],
    itl: Mapping[date, Sequence[float | None]],
) -> dict[str, Any]:
    """TTFT and ITL p50/p95 in milliseconds, from summed buckets per day."""

    def ms(values: Mapping[date, Sequence[float | None]], i: int) -> list:
        seconds = (v[i] for v in values.values())
        return _clean(None if x is None else x * 1000 for x in seconds)

    traces = []
    for label, data, color, axis in (
        ("TTFT", ttft, PALETTE[0], "y"),
        ("ITL", itl, PALETTE[2], "y2"),
    ):
        for i, (q, dash) in enumerate((("p50", "dot"), ("p95", "solid"))):
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{label} {q}",
                    "x": _days(data.keys()),
                    "y": ms(data, i),
                    "yaxis": axis,
                    "line": {"color": color, "dash": dash},
                }
            )
    layout = _layout("Latency from histogram buckets, daily", "TTFT (ms)")
    layout["yaxis2"] = {
        "title": {"text": "ITL (ms)"},
        "overlaying": "y",
        "side": "right",
        "rangemode": "tozero",
        "showgrid": False,
    }
    layout["margin"]["r"] = 64
    return {"data": traces, "layout": layout}


def _stamps(values: Iterable[Any]) -> list[str]:
    return [pd.Timestamp(v).strftime("%Y-%m-%dT%H:%M:%SZ") for v in values]


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
    x = _stamps(r.period_start for r in rows)
    symbol = SYMBOLS_PREFIX.get(currency, f"{currency} ")
    flagged = [r for r in rows if r.flag]
    colours = {"anomaly": PALETTE[4], "traffic": PALETTE[2], "size": PALETTE[1]}
    traces: list[dict[str, Any]] = [
        *band_traces(
            x,
            _clean(getattr(r, low) for r in rows),
            _clean(getattr(r, high) for r in rows),
            name="band",
            fillcolor="rgba(37,99,235,0.12)",
        ),
        {
            "type": "scatter", "mode": "lines", "name": "baseline",
            "x": x, "y": _clean(getattr(r, mid) for r in rows),
            "line": {"dash": "dot", "color": PALETTE[8], "width": 1.5},
            "connectgaps": False,
        },
        {
            "type": "scatter", "mode": "lines+markers", "name": "actual",
            "x": x, "y": _clean(getattr(r, field) for r in rows),
            "line": {"color": PALETTE[0], "width": 2}, "marker": {"size": 3},
            "connectgaps": False,
        },
    ]  # fmt: skip
    partial = [r for r in rows if not r.complete]
    if partial:
        # The period in progress: its figure will move; it is never judged.
        traces.append(
            {
                "type": "scatter", "mode": "markers", "name": "partial (not closed)",
                "x": _stamps(r.period_start for r in partial),
                "y": _clean(getattr(r, field) for r in partial),
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
                    "x": _stamps(r.period_start for r in these),
                    "y": _clean(getattr(r, field) for r in these),
                    "marker": {"size": 9, "color": colour, "symbol": "circle-open",
                               "line": {"width": 2}},
                    "text": [r.cause for r in these],
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )  # fmt: skip
    layout = _layout(
        title,
        "per 1M tokens" if suffix else "per 1k requests",
        tickprefix=symbol.strip() if currency == "USD" else "",
    )
    return {"data": traces, "layout": layout}


SYMBOLS_PREFIX = {"USD": "$"}


def forecast_fan(days: Sequence[tuple[Any, float]], forecast: Any) -> dict[str, Any]:
    """Cumulative spend this month and the month-end point with its interval."""
    x = _stamps(d for d, _ in days)
    running: list[float] = []
    total = 0.0
    for _, cost in days:
        total += cost
        running.append(total)
    end = _stamps([forecast.month + pd.offsets.MonthEnd(0)])
    traces = [
        {
            "type": "scatter", "mode": "lines+markers", "name": "spend to date",
            "x": x, "y": _clean(running), "line": {"color": PALETTE[0]},
        },
        {
            "type": "scatter", "mode": "markers", "name": "month-end forecast (80%)",
            "x": end, "y": [forecast.point],
            "error_y": {"type": "data", "symmetric": False,
                        "array": [forecast.upper - forecast.point],
                        "arrayminus": [forecast.point - forecast.lower]},
            "marker": {"size": 10, "color": PALETTE[1]},
        },
    ]  # fmt: skip
    if forecast.budget is not None:
        traces.append(
            {
                "type": "scatter", "mode": "lines", "name": "budget",
                "x": [x[0] if x else end[0], end[0]],
                "y": [forecast.budget, forecast.budget],
                "line": {"dash": "dash", "color": PALETTE[4]},
            }
        )  # fmt: skip
    return {
        "data": traces,
        "layout": _layout("Spend this month", "spend", tickprefix="$"),
    }
