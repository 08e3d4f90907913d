"""Plotly figures of the capacity pages, returned as JSON for Plotly.newPlot."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from analytics.capacity.backtest import Backtest
from costapp.capacity.whatif import Curve, MemoryBar

COLORS = ("#334e68", "#2563eb", "#d97706", "#059669")
_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
    "height": 340,
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "plot_bgcolor": "#fff",
    "paper_bgcolor": "#fff",
    "legend": {"orientation": "h", "y": -0.2},
}


def throughput_latency(curves: Sequence[Curve]) -> str:
    """Output tokens/s per replica against ITL at the SLA percentile, one line
    per scenario over batch size, the chosen batch marked, the SLA as a line."""
    fig = go.Figure()
    slas: set[float] = set()
    for i, curve in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        fig.add_trace(
            go.Scatter(
                x=curve.itl_ms,
                y=curve.tokens_per_s,
                mode="lines+markers",
                name=curve.label,
                line={"color": color, "width": 2},
                marker={"size": 4},
                customdata=curve.batch,
                hovertemplate="batch %{customdata}<br>ITL %{x:.1f} ms<br>"
                "%{y:,.0f} tok/s<extra>" + curve.label + "</extra>",
            )
        )
        if curve.chosen_batch in curve.batch:
            j = curve.batch.index(curve.chosen_batch)
            fig.add_trace(
                go.Scatter(
                    x=[curve.itl_ms[j]],
                    y=[curve.tokens_per_s[j]],
                    mode="markers",
                    marker={"size": 11, "color": color, "symbol": "diamond"},
                    name=f"{curve.label}: batch {curve.chosen_batch}",
                    showlegend=False,
                    hovertemplate="chosen batch %{text}<extra></extra>",
                    text=[str(curve.chosen_batch)],
                )
            )
        slas.add(curve.sla_ms)
    for sla in sorted(slas):
        fig.add_vline(
            x=sla,
            line={"color": "#b91c1c", "dash": "dash"},
            annotation_text=f"ITL SLA {sla:g} ms",
            annotation_position="top left",
        )
    fig.update_layout(
        **_LAYOUT,
        title={
            "text": "Throughput vs ITL, batch 1 to the KV limit",
            "x": 0.01,
        },
        xaxis={
            "title": "ITL at SLA percentile (ms)",
            "gridcolor": "#eef1f4",
            "rangemode": "tozero",
        },
        yaxis={
            "title": "output tokens/s per replica",
            "gridcolor": "#eef1f4",
            "rangemode": "tozero",
        },
    )
    return fig.to_json()


def memory_use(bars: Sequence[MemoryBar]) -> str:
    """Device memory per scenario: weights, activations and overheads, KV pool,
    and what gpu_memory_utilization leaves free."""
    labels = [b.label for b in bars]
    fig = go.Figure()
    for name, values, color in (
        ("weights", [b.weights_gib for b in bars], "#334e68"),
        ("activations + overheads", [b.activation_gib for b in bars], "#9fb3c8"),
        ("KV pool", [b.kv_gib for b in bars], "#2563eb"),
        ("free", [b.free_gib for b in bars], "#e4e7eb"),
    ):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=name,
                marker_color=color,
                hovertemplate="%{y:.1f} GiB<extra>" + name + "</extra>",
                text=[f"{v:.1f}" for v in values],
                textposition="inside",
            )
        )
    fig.update_layout(
        **_LAYOUT,
        barmode="stack",
        # A label that only fits shrunk to a few pixels is hidden (the hover
        # still has it): 7.9 GiB free read as a smudge at 0.6x.
        uniformtext={"minsize": 11, "mode": "hide"},
        title={"text": "Memory per GPU (GiB)", "x": 0.01},
        yaxis={"title": "GiB", "gridcolor": "#eef1f4"},
    )
    return fig.to_json()


def pareto(
    costs: Sequence[float],
    latencies: Sequence[float],
    labels: Sequence[str],
    front_costs: Sequence[float],
    front_latencies: Sequence[float],
    currency: str,
) -> str:
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=costs,
            y=latencies,
            mode="markers",
            name="feasible configurations",
            marker={"color": "#9fb3c8", "size": 6},
            text=list(labels),
            hovertemplate="%{text}<br>%{x:.4f} per 1k req<br>%{y:.2f} s<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=front_costs,
            y=front_latencies,
            mode="lines+markers",
            name="Pareto front",
            line={"color": "#2563eb", "width": 2, "shape": "hv"},
            marker={"size": 8},
        )
    )
    fig.update_layout(
        **_LAYOUT,
        title={"text": "Cost against latency", "x": 0.01},
        xaxis={"title": f"{currency} per 1k requests", "gridcolor": "#eef1f4"},
        yaxis={"title": "p95 request latency (s)", "gridcolor": "#eef1f4"},
    )
    return fig.to_json()


def backtest_itl(backtest: Backtest) -> str | None:
    """Hourly mean ITL against the hourly mean running batch per replica:
    observed (telemetry) beside predicted (the engine at the same batch)."""
    hours = [
        h
        for h in backtest.hours
        if h.batch is not None
        and h.observed_itl_ms is not None
        and h.predicted_itl_ms is not None
    ]
    if not hours:
        return None
    hours.sort(key=lambda h: h.batch or 0.0)
    batch = [h.batch for h in hours]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=batch,
            y=[h.observed_itl_ms for h in hours],
            mode="markers",
            name="observed (histogram sum ÷ count)",
            marker={"color": "#d97706", "size": 5},
            text=[str(h.hour) for h in hours],
            hovertemplate="%{text}<br>batch %{x:.1f}<br>%{y:.1f} ms<extra>observed"
            "</extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=batch,
            y=[h.predicted_itl_ms for h in hours],
            mode="markers",
            name=f"predicted ({backtest.calibration})",
            marker={"color": "#2563eb", "size": 5, "symbol": "x"},
            hovertemplate="batch %{x:.1f}<br>%{y:.1f} ms<extra>predicted</extra>",
        )
    )
    fig.update_layout(
        **_LAYOUT,
        title={"text": "Mean ITL by hour against running batch", "x": 0.01},
        xaxis={
            "title": "mean running batch per replica",
            "gridcolor": "#eef1f4",
            "rangemode": "tozero",
        },
        yaxis={"title": "mean ITL (ms)", "gridcolor": "#eef1f4", "rangemode": "tozero"},
    )
    return fig.to_json()
