"""Unit-economics pages: thin views over economics.selectors and charts."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from costapp import formatting as fmt
from costapp.access import requires
from costapp.economics import charts
from costapp.economics.selectors import overview_read

_KPI_FORMAT: dict[str, Callable[[float], str]] = {
    "usd": fmt.usd,
    "usd_unit": fmt.usd_unit,
    "count": fmt.count_short,
}


@requires("costapp.view_overview")
def overview(request: HttpRequest) -> HttpResponse:
    data = overview_read(today=fmt.display_today())
    kpis = [
        {
            "label": k.label,
            "value": _KPI_FORMAT[k.unit](k.value),
            "previous": _KPI_FORMAT[k.unit](k.previous),
            "change": fmt.percent(k.change, signed=True),
            # More requests is good news; a higher cost is not.
            "trend": fmt.trend_class(
                -k.change if k.unit == "count" else k.change, threshold=0.05
            ),
        }
        for k in data.kpis
    ]
    rows = [
        {
            "name": s.name,
            "team": s.team,
            "gpu": s.gpu,
            "requests": fmt.count_short(s.requests_7d),
            "requests_raw": repr(s.requests_7d),
            "cost": fmt.usd(s.cost_7d),
            "cost_raw": repr(s.cost_7d),
            "per_1k": fmt.usd_unit(s.cost_per_1k_7d),
            "per_1k_raw": repr(s.cost_per_1k_7d),
            "per_1k_baseline": fmt.usd_unit(s.cost_per_1k_baseline),
            "per_1k_change": fmt.percent(s.cost_per_1k_change, signed=True),
            "per_1k_trend": fmt.trend_class(s.cost_per_1k_change),
            "per_1m": fmt.usd_unit(s.cost_per_1m_tokens_7d),
            "per_1m_raw": repr(s.cost_per_1m_tokens_7d),
            "gpu_hours": fmt.number(s.gpu_hours_7d),
            "gpu_hours_raw": repr(s.gpu_hours_7d),
            "truncation": fmt.percent(s.truncation_share),
            "truncation_raw": repr(s.truncation_share),
        }
        for s in data.deployments
    ]
    return render(
        request,
        "economics/overview.html",
        {
            "start": data.start,
            "end": data.end,
            "kpis": kpis,
            "rows": rows,
            "figure": charts.cost_per_1k_daily(data.days),
            "provisional": "provisional" in data.basis,
            "billed": "billed" in data.basis,
            "has_data": not data.days.empty,
        },
    )
