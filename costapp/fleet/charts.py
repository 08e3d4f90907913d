"""The deployment page's daily figures from its usage days (requests by
finished reason; GPU-hours and replicas): data in, figure dict out."""

from __future__ import annotations

from typing import Any

import pandas as pd

from costapp.charts import PALETTE, base_layout, floats_or_null, iso_days


def requests_by_reason_daily(frame: pd.DataFrame) -> dict[str, Any]:
    rows = frame.sort_values("day")
    x = iso_days(rows["day"])
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
                "y": floats_or_null(rows[column]),
                "marker": {"color": color},
            }
            for name, column, color in series
        ],
        "layout": base_layout(
            "Finished requests by finished_reason, daily", "requests", barmode="stack"
        ),
    }


def capacity_daily(frame: pd.DataFrame) -> dict[str, Any]:
    rows = frame.sort_values("day")
    layout = base_layout("Measured GPU-hours and replicas, daily", "GPU-hours")
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
                "x": iso_days(rows["day"]),
                "y": floats_or_null(rows["gpu_hours"]),
                "marker": {"color": "#93c5fd"},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "replicas",
                "x": iso_days(rows["day"]),
                "y": floats_or_null(rows["replicas_mean"]),
                "yaxis": "y2",
                "line": {"color": PALETTE[3]},
            },
        ],
        "layout": layout,
    }
