from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from costapp import formatting as fmt
from costapp.access import requires
from costapp.economics import charts, present
from costapp.economics.figures import deployment_economics_read
from costapp.economics.forms import EconomicsGrainForm
from costapp.economics.selectors import deployment_detail_read
from costapp.models import Deployment
from costapp.telemetry.selectors import latency_daily_percentiles


@requires("costapp.view_fleet")
def deployment_list(request: HttpRequest) -> HttpResponse:
    deployments = Deployment.objects.select_related("pool").order_by("name")
    return render(request, "fleet/deployment_list.html", {"deployments": deployments})


@requires("costapp.view_fleet")
def deployment_detail(request: HttpRequest, name: str) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("pool"), name=name)
    detail = deployment_detail_read(deployment, today=fmt.display_today())
    start, end = detail.start, detail.end
    ttft = latency_daily_percentiles(deployment, start=start, end=end, metric="ttft")
    itl = latency_daily_percentiles(deployment, start=start, end=end, metric="itl")
    grain_form = EconomicsGrainForm(request.GET or None)
    grain = grain_form.grain_or_default()
    economics = deployment_economics_read(deployment, start=start, end=end, grain=grain)
    figures = {
        "baseline": charts.baseline_band(
            economics.window.figures if economics.window else [],
            title=f"$ per 1k requests against its EWMA baseline (band), by {grain}",
        ),
        "unit-costs": charts.unit_costs_daily(detail.days),
        "requests": charts.requests_by_reason_daily(detail.days),
        "capacity": charts.capacity_daily(detail.days),
        "latency": charts.latency_daily(ttft, itl),
    }
    return render(
        request,
        "fleet/deployment_detail.html",
        {
            "d": deployment,
            "start": detail.start,
            "end": detail.end,
            "figures": figures,
            "has_data": not detail.days.empty,
            "economics": present.deployment_context(economics),
            "grain": grain,
            "grain_form": grain_form,
            "slo_ttft": fmt.number(deployment.slo_ttft_p95_ms, 0)
            if deployment.slo_ttft_p95_ms
            else None,
            "slo_itl": fmt.number(deployment.slo_itl_p95_ms, 0)
            if deployment.slo_itl_p95_ms
            else None,
        },
    )
