"""Plotly figures of the telemetry and deployment pages (data in, dict out).

Series arrive bucketed (``costapp.telemetry.series``), so every trace holds at
most ``analytics.downsample.MAX_POINTS`` points. Times are drawn in the display
time zone as wall-clock strings (plotly.js has no time zones); the axis says
which zone. Missing figures are null (a gap or a blank cell), and a series
that was never measured says so on the chart instead of drawing zeros.
"""

from __future__ import annotations

import json
import math
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from costapp.charts import FONT, GRID, PALETTE, band_traces
from costapp.telemetry.series import DeviceGrid, Series

NOT_MEASURED = "not measured"
LAYER_LABELS = {
    "gr_engine_active_mean": "GR engine active (DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
    "dram_active_mean": "DRAM active (DCGM_FI_PROF_DRAM_ACTIVE)",
    "gpu_util_mean": "GPU_UTIL (DCGM_FI_DEV_GPU_UTIL)",
}


def json_script(value: Any, element_id: str) -> SafeString:
    """``django.utils.html.json_script``'s very output, escaped with three
    ``str.replace`` calls instead of ``str.translate`` (a tenth of the 90-day
    telemetry page, on its 700 kB of figures)."""
    text = (
        json.dumps(value, cls=DjangoJSONEncoder)
        .replace("&", "\\u0026")
        .replace("<", "\\u003C")
        .replace(">", "\\u003E")
    )
    return format_html(
        '<script id="{}" type="application/json">{}</script>',
        element_id,
        mark_safe(text),  # noqa: S308  # escaped above, as json_script does
    )


def values(items: Iterable[Any], *, scale: float = 1.0) -> list[float | None]:
    """Floats at 7 significant digits (enough for rel 1e-6; a third of the
    bytes of repr), NaN and None as null."""
    out: list[float | None] = []
    for v in items:
        if v is None:
            out.append(None)
            continue
        f = float(v) * scale
        out.append(None if math.isnan(f) else float(f"{f:.7g}"))
    return out


def stamps(index: pd.DatetimeIndex, tz: str) -> list[str]:
    """Bucket starts as wall-clock time in ``tz``."""
    local = index.tz_convert(zoneinfo.ZoneInfo(tz))
    return [t.strftime("%Y-%m-%d %H:%M") for t in local]


def width_label(width: pd.Timedelta) -> str:
    hours = width / pd.Timedelta(hours=1)
    if hours < 24 or hours % 24:
        return f"{hours:g} h"
    return f"{hours / 24:g} d"


def _panels(
    title: str, tz: str, width: pd.Timedelta, axes: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """A layout of stacked panels sharing one time axis, top panel first, so
    no two series draw over each other on overlaid axes."""
    n = len(axes)
    gap = 0.06
    height = (1.0 - gap * (n - 1)) / n
    total = 170 + 170 * n
    top, bottom = 44, 110
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "font": FONT,
        "margin": {"l": 72, "r": 16, "t": top, "b": bottom},
        "height": total,
        "hovermode": "x unified",
        # Below the time axis and its title (paper units: 58 px down).
        "legend": {
            "orientation": "h",
            "y": -58 / (total - top - bottom),
            "yanchor": "top",
        },
        "plot_bgcolor": "#fff",
        "paper_bgcolor": "#fff",
        "xaxis": {
            "type": "date",
            "gridcolor": GRID,
            "anchor": f"y{n}" if n > 1 else "y",
            "title": {"text": f"time ({tz}), points of {width_label(width)}"},
        },
        "annotations": [],
        "shapes": [],
    }
    for i, axis in enumerate(axes):
        upper = 1.0 - i * (height + gap)
        name = "yaxis" if i == 0 else f"yaxis{i + 1}"
        layout[name] = {
            "domain": [max(upper - height, 0.0), upper],
            "anchor": "x",
            "gridcolor": GRID,
            "rangemode": "tozero",
            **axis,
        }
    return layout


def _axis_ref(i: int) -> str:
    return "y" if i == 0 else f"y{i + 1}"


def _not_measured(layout: dict[str, Any], panel: int, what: str) -> None:
    layout["annotations"].append(
        {
            "text": f"{what}: {NOT_MEASURED}",
            "xref": "x domain",
            "yref": f"{_axis_ref(panel)} domain",
            "x": 0.5,
            "y": 0.5,
            "showarrow": False,
            "font": {"color": "#64748b", "size": 13},
        }
    )


def _line(
    name: str,
    x: list[str],
    y: list[float | None],
    panel: int,
    color: str,
    hover: str,
    **extra: Any,
) -> dict[str, Any]:
    trace: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines",
        "name": name,
        "x": x,
        "y": y,
        "yaxis": _axis_ref(panel),
        "line": {"color": color, "width": 1.6},
        "connectgaps": False,
        "hovertemplate": hover + "<extra>%{fullData.name}</extra>",
    }
    trace.update(extra)
    return trace


def _slo(layout: dict[str, Any], panel: int, value_ms: float, label: str) -> None:
    ref = _axis_ref(panel)
    layout["shapes"].append(
        {
            "type": "line",
            "xref": "x domain",
            "x0": 0,
            "x1": 1,
            "yref": ref,
            "y0": value_ms,
            "y1": value_ms,
            "line": {"color": PALETTE[4], "dash": "dash", "width": 1.5},
            "name": label,
        }
    )
    layout["annotations"].append(
        {
            "text": f"{label} {value_ms:,.0f} ms",
            "xref": "x domain",
            "yref": ref,
            "x": 1,
            "y": value_ms,
            "xanchor": "right",
            "yanchor": "bottom",
            "showarrow": False,
            "font": {"color": PALETTE[4], "size": 11},
        }
    )
    # The line stays in view even when latency sits far below it.
    layout[f"yaxis{'' if panel == 0 else panel + 1}"]["rangemode"] = "tozero"


def latency_breakdown(
    series: Series,
    *,
    phase: pd.DataFrame,
    phase_source: str,
    tz: str,
    slo_ttft_ms: float | None,
    slo_itl_ms: float | None,
) -> dict[str, Any]:
    """TTFT, inter-token and end-to-end percentiles on panels of their own,
    the SLO p95 lines on theirs, and the share of request time in prefill
    against decode."""
    x = stamps(series.grid.starts, tz)
    axes: list[dict[str, Any]] = [
        {"title": {"text": "TTFT (ms)"}, "ticksuffix": " ms"},
        {"title": {"text": "inter-token (ms)"}, "ticksuffix": " ms"},
        {"title": {"text": "end-to-end (s)"}, "ticksuffix": " s"},
        {"title": {"text": "share of time"}, "tickformat": ".0%", "range": [0, 1]},
    ]
    layout = _panels(
        "Latency from summed histogram buckets", tz, series.grid.width, axes
    )
    traces: list[dict[str, Any]] = []
    panels = (("ttft", "TTFT", 1000.0, " ms"), ("itl", "ITL", 1000.0, " ms"),
              ("e2e", "E2E", 1.0, " s"))  # fmt: skip
    for i, (metric, label, scale, unit) in enumerate(panels):
        if metric not in series.measured:
            _not_measured(layout, i, f"{label} histogram")
            continue
        q = series.latency[metric]
        fmt = ",.1f" if unit == " ms" else ",.2f"
        for col, dash, color in (("p50", "dot", PALETTE[0]), ("p95", "solid", PALETTE[0]),
                                 ("p99", "dash", PALETTE[8])):  # fmt: skip
            if col not in q:
                continue
            traces.append(
                _line(f"{label} {col}", x, values(q[col], scale=scale), i, color,
                      f"%{{y:{fmt}}}{unit}", line={"color": color, "dash": dash,
                                                  "width": 1.6})
            )  # fmt: skip
    if slo_ttft_ms:
        _slo(layout, 0, slo_ttft_ms, "TTFT SLO p95")
    if slo_itl_ms:
        _slo(layout, 1, slo_itl_ms, "ITL SLO p95")
    if phase_source:
        for j, (col, label) in enumerate(
            (("prefill", "prefill"), ("decode", "decode"))
        ):
            traces.append(
                _line(f"{label} share", x, values(phase[col]), 3, PALETTE[2 + j],
                      "%{y:.1%}")
            )  # fmt: skip
        layout["annotations"].append(
            {"text": phase_source, "xref": "x domain", "yref": "y4 domain", "x": 0,
             "y": 1.0, "xanchor": "left", "yanchor": "bottom", "showarrow": False,
             "font": {"size": 11, "color": "#64748b"}}
        )  # fmt: skip
    else:
        _not_measured(layout, 3, "prefill vs decode")
    return compact({"data": traces, "layout": layout})


def kv_cache(series: Series, *, tz: str) -> dict[str, Any]:
    """KV-cache usage (mean, max band), preemptions, prefix-cache hit rate."""
    x = stamps(series.grid.starts, tz)
    f = series.frame
    width = width_label(series.grid.width)
    axes: list[dict[str, Any]] = [
        {"title": {"text": "KV-cache usage"}, "tickformat": ".0%"},
        {"title": {"text": f"preemptions per {width}"}},
        {"title": {"text": "prefix-cache hits"}, "tickformat": ".0%"},
    ]
    layout = _panels("KV-cache efficiency", tz, series.grid.width, axes)
    traces: list[dict[str, Any]] = []
    if "kv_cache_usage_mean" in series.measured:
        mean, peak = values(f["kv_cache_usage_mean"]), values(f["kv_cache_usage_max"])
        traces.append(
            _line("KV usage mean", x, mean, 0, PALETTE[3], "%{y:.1%}")
        )  # fmt: skip
        traces.append(
            _line("KV usage max", x, peak, 0, "rgba(124,58,237,0.45)", "%{y:.1%}",
                  line={"width": 0.8, "color": "rgba(124,58,237,0.45)"})
        )  # fmt: skip
        # Shaded from the mean up to the max, stretch by stretch.
        traces.extend(
            band_traces(x, mean, peak, name="KV usage range",
                        fillcolor="rgba(124,58,237,0.12)", yaxis=_axis_ref(0))
        )  # fmt: skip
    else:
        _not_measured(layout, 0, "KV-cache usage")
    if "preemptions" in series.measured:
        traces.append(
            {"type": "bar", "name": "preemptions", "x": x,
             "y": values(f["preemptions"]), "yaxis": "y2",
             "marker": {"color": PALETTE[4]},
             "hovertemplate": "%{y:,.0f} preemptions<extra></extra>"}
        )  # fmt: skip
    else:
        _not_measured(layout, 1, "preemptions")
    if "prefix_hit_rate" in series.measured:
        traces.append(
            _line("prefix-cache hit rate", x, values(f["prefix_hit_rate"]), 2,
                  PALETTE[5], "%{y:.1%}")
        )  # fmt: skip
    else:
        _not_measured(layout, 2, "prefix-cache hit rate")
    return compact({"data": traces, "layout": layout})


def traffic(series: Series, *, tz: str) -> dict[str, Any]:
    """Requests by finished_reason and GPU-seconds as GPU-hours, per bucket."""
    x = stamps(series.grid.starts, tz)
    f = series.frame
    width = width_label(series.grid.width)
    axes: list[dict[str, Any]] = [
        {"title": {"text": f"requests per {width}"}},
        {"title": {"text": f"GPU-hours per {width}"}, "ticksuffix": " h"},
        {"title": {"text": "replicas"}},
    ]
    layout = _panels("Traffic and GPUs", tz, series.grid.width, axes)
    layout["barmode"] = "stack"
    traces: list[dict[str, Any]] = [
        {"type": "bar", "name": name, "x": x, "y": values(f[col]), "yaxis": "y",
         "marker": {"color": color},
         "hovertemplate": f"%{{y:,.0f}} {name}<extra></extra>"}
        for name, col, color in (
            ("stop", "requests_stop", PALETTE[2]),
            ("length (truncated)", "requests_length", PALETTE[1]),
            ("aborted", "requests_aborted", PALETTE[4]),
        )
    ]  # fmt: skip
    if "gpu_seconds" in series.measured:
        traces.append(
            {"type": "bar", "name": "GPU-hours", "x": x,
             "y": values(f["gpu_seconds"], scale=1 / 3600), "yaxis": "y2",
             "marker": {"color": "#93c5fd"},
             "hovertemplate": "%{y:,.2f} GPU-hours<extra></extra>"}
        )  # fmt: skip
    else:
        _not_measured(layout, 1, "GPU-seconds")
    traces.append(
        _line("replicas max", x, values(f["replicas_max"]), 2, PALETTE[8],
              "%{y:,.0f}", line={"dash": "dot", "width": 1, "color": PALETTE[8]})
    )  # fmt: skip
    traces.append(
        _line("replicas mean", x, values(f["replicas_mean"]), 2, PALETTE[3],
              "%{y:,.2f}")
    )  # fmt: skip
    return compact({"data": traces, "layout": layout})


def gpu_heatmap(grid: DeviceGrid, *, tz: str) -> dict[str, Any]:
    """GPU or MIG instance x time, one heatmap layer per DCGM gauge with a
    toggle; GPU_UTIL only where a device reports it; blank cells unmeasured."""
    x = stamps(grid.grid.starts, tz)
    rows = len(grid.devices)
    layout: dict[str, Any] = {
        "title": {"text": "GPU utilisation per GPU / MIG instance", "x": 0,
                  "xanchor": "left", "font": {"size": 15}},
        "font": FONT,
        "margin": {"l": 220, "r": 16, "t": 96, "b": 48},
        "height": max(280, min(640, 140 + 8 * rows)),
        "plot_bgcolor": "#f8fafc",
        "paper_bgcolor": "#fff",
        "xaxis": {"type": "date", "title": {
            "text": f"time ({tz}), cells of {width_label(grid.grid.width)}"}},
        "yaxis": {"autorange": "reversed", "automargin": True,
                  "tickfont": {"size": 10}},
        "annotations": [],
    }  # fmt: skip
    layers = [f for f in LAYER_LABELS if f in grid.measured]
    if not rows or not layers:
        layout["annotations"].append(
            {"text": f"GPU utilisation: {NOT_MEASURED} (no DCGM rows for this "
                     "deployment in the window: set its DCGM selector)",
             "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
             "showarrow": False, "font": {"color": "#64748b", "size": 13}}
        )  # fmt: skip
        return {"data": [], "layout": layout}
    traces = []
    for i, field in enumerate(layers):
        matrix = grid.layers[field]
        if field == "gpu_util_mean":
            matrix = matrix / 100.0  # DCGM reports GPU_UTIL in percent
        traces.append(
            {
                "type": "heatmap",
                "name": LAYER_LABELS[field],
                "x": x,
                "y": grid.devices,
                "z": [values(row) for row in matrix],
                "zmin": 0,
                "zmax": 1,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "active"}, "tickformat": ".0%"},
                "hoverongaps": False,
                "visible": i == 0,
                "hovertemplate": "%{y}<br>%{x}<br>%{z:.1%}<extra>"
                + LAYER_LABELS[field].split(" (")[0]
                + "</extra>",
            }
        )
    layout["updatemenus"] = [
        {
            "type": "buttons",
            "direction": "right",
            "x": 1,
            "y": 1.02,
            "xanchor": "right",
            "yanchor": "bottom",
            "showactive": True,
            "buttons": [
                {
                    "label": LAYER_LABELS[field].split(" (")[0],
                    "method": "restyle",
                    "args": [{"visible": [j == i for j in range(len(layers))]}],
                }
                for i, field in enumerate(layers)
            ],
        }
    ]
    if "gpu_util_mean" not in grid.measured:
        layout["annotations"].append(
            {"text": "GPU_UTIL not reported (MIG instances do not have it)",
             "xref": "paper", "yref": "paper", "x": 0, "y": 1.02,
             "xanchor": "left", "yanchor": "bottom", "showarrow": False,
             "font": {"size": 11, "color": "#64748b"}}
        )  # fmt: skip
    return compact({"data": traces, "layout": layout})


def compact(figure: dict[str, Any]) -> dict[str, Any]:
    """Move the time axis all traces share to ``figure["x"]`` once instead of
    once per trace (charts.js hands it back to each trace before drawing):
    20 traces of 1,080 two-hour points repeat 400 kB of timestamps."""
    traces = figure.get("data", [])
    shared = traces[0].get("x") if traces else None
    if shared and all(t.get("x") == shared for t in traces):
        for t in traces:
            del t["x"]
        figure["x"] = shared
    return figure


def expanded(figure: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The traces as charts.js draws them (each with its ``x``)."""
    shared = figure.get("x")
    return [{**t, "x": t["x"] if "x" in t else shared} for t in figure.get("data", [])]


def trace_points(figure: Mapping[str, Any]) -> list[int]:
    """Points per trace (columns for a heatmap), for checks and docs."""
    return [len(t.get("x") or []) for t in expanded(figure)]


CLOCK_MARKS = {
    "estimated": ("estimated bill", "diamond-open", PALETTE[1]),
    "provisional": ("provisional (rate card, no bill yet)", "square-open", PALETTE[8]),
}


def cost_view(
    rows: Sequence[Any],
    *,
    currency: str,
    links: Mapping[int, str],
) -> dict[str, Any]:
    """Daily unit costs from the stored figures (``FigureRow``): $ per 1k
    requests against its EWMA baseline band, $ per 1M tokens and $ per
    GPU-hour on panels of their own; estimated and provisional days marked;
    flagged days marked and linked (``links``: figure pk -> explanation URL;
    charts.js follows a click on a point of a trace with ``meta.links``)."""
    symbol = "$" if currency == "USD" else f"{currency} "
    x = [r.period_start.strftime("%Y-%m-%d") for r in rows]
    axes: list[dict[str, Any]] = [
        {"title": {"text": "per 1k requests"}, "tickprefix": symbol},
        {"title": {"text": "per 1M tokens"}, "tickprefix": symbol},
        {"title": {"text": "per GPU-hour"}, "tickprefix": symbol},
    ]
    layout = _panels("Unit costs against baseline, daily", "UTC", pd.Timedelta(days=1),
                     axes)  # fmt: skip
    layout["xaxis"]["title"]["text"] = "UTC day"
    money = f"{symbol}%{{y:,.3f}}" if currency == "USD" else "%{y:,.3f}"
    clock = [r.clock for r in rows]
    traces: list[dict[str, Any]] = [
        *band_traces(x, values(r.lower for r in rows), values(r.upper for r in rows),
                     name="baseline band", fillcolor="rgba(37,99,235,0.12)",
                     yaxis=_axis_ref(0)),
        _line("baseline (EWMA)", x, values(r.baseline for r in rows), 0, PALETTE[8],
              money, line={"dash": "dot", "width": 1.5, "color": PALETTE[8]}),
        _line("$ per 1k requests", x, values(r.cost_per_1k_requests for r in rows), 0,
              PALETTE[0], money + " (%{text})", mode="lines+markers",
              marker={"size": 4}, text=clock),
        _line("$ per 1M tokens", x, values(r.cost_per_1m_tokens for r in rows), 1,
              PALETTE[1], money, mode="lines+markers", marker={"size": 3}),
        _line("$ per GPU-hour", x, values(r.cost_per_gpu_hour for r in rows), 2,
              PALETTE[2], money, mode="lines+markers", marker={"size": 3}),
    ]  # fmt: skip
    for key, (label, marker, color) in CLOCK_MARKS.items():
        these = [r for r in rows if r.clock == key]
        if these:
            traces.append(
                {"type": "scatter", "mode": "markers", "name": label,
                 "x": [r.period_start.strftime("%Y-%m-%d") for r in these],
                 "y": values(r.cost_per_1k_requests for r in these),
                 "marker": {"symbol": marker, "size": 10, "color": color,
                            "line": {"width": 2}},
                 "hovertemplate": f"{label}<extra></extra>"}
            )  # fmt: skip
    flagged = [r for r in rows if r.flag]
    if flagged:
        traces.append(
            {"type": "scatter", "mode": "markers", "name": "flagged (click: why)",
             "x": [r.period_start.strftime("%Y-%m-%d") for r in flagged],
             "y": values(r.cost_per_1k_requests for r in flagged),
             "marker": {"symbol": "circle-open", "size": 13, "color": PALETTE[4],
                        "line": {"width": 2.5}},
             "text": [f"{r.flag}: {r.cause}" for r in flagged],
             "customdata": [links.get(r.pk, "") for r in flagged],
             "meta": {"links": True},
             "hovertemplate": "%{text}<extra>click for the explanation</extra>"}
        )  # fmt: skip
    if not rows:
        _not_measured(layout, 0, "unit costs (no stored figures in this window)")
    return {"data": traces, "layout": layout}
