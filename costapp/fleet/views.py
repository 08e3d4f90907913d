from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from analytics.downsample import grid_for
from costapp import formatting as fmt
from costapp import pagecache
from costapp.access import requires
from costapp.charts import with_marks
from costapp.costs.forms import DEFAULT_PRESET, PRESETS, RangeForm, default_window
from costapp.costs.selectors import BASES
from costapp.days import utc_midnight
from costapp.economics import present
from costapp.economics.figures import deployment_economics_read
from costapp.economics.forms import EconomicsGrainForm
from costapp.economics.idle.present import idle_cards_context
from costapp.economics.selectors import deployment_usage_days_read
from costapp.fleet import charts
from costapp.fleet.annotations import deployment_marks_read
from costapp.models import Deployment
from costapp.telemetry import charts as telemetry_charts
from costapp.telemetry import rollups
from costapp.telemetry.prompt_sources import prompt_economy_card, prompt_economy_read
from costapp.telemetry.series import device_grid_read, phase_share, series_bucket


@requires("costapp.view_fleet")
def deployment_list(request: HttpRequest) -> HttpResponse:
    deployments = Deployment.objects.select_related("pool").order_by("name")
    return render(request, "fleet/deployment_list.html", {"deployments": deployments})


def _range(request: HttpRequest) -> tuple[RangeForm, dict[str, Any], list[str]]:
    """(form to show, window shown, errors): the bills pages' range form; a
    refused value is named and the default window shown instead."""
    if not request.GET:
        return RangeForm(initial={"preset": DEFAULT_PRESET}), default_window(), []
    form = RangeForm(request.GET)
    if form.is_valid():
        return form, form.cleaned_data, []
    shown = default_window()
    errors = [
        *form.messages(),
        f"showing the default window {shown['start']} to {shown['end']} "
        f"(exclusive; {PRESETS[shown['preset']]}) instead",
    ]
    return RangeForm(initial={**shown, "preset": "custom"}), shown, errors


@requires("costapp.view_fleet")
def deployment_detail(request: HttpRequest, name: str) -> HttpResponse:
    deployment = get_object_or_404(Deployment.objects.select_related("pool"), name=name)
    form, w, errors = _range(request)
    body = pagecache.body_render(
        request,
        "fleet/_deployment_body.html",
        page="deployment",
        key=(deployment.pk, sorted(w.items())),
        context=lambda: _deployment_context(request, deployment, form, w, errors),
    )
    return render(
        request, "fleet/deployment_detail.html", {"d": deployment, "body": body}
    )


def _deployment_context(
    request: HttpRequest,
    deployment: Deployment,
    form: RangeForm,
    w: dict[str, Any],
    errors: list[str],
) -> dict[str, Any]:
    """Everything the deployment page's body shows: read only when the page
    cache has no body for this data, query string, day and rights."""
    start, end, basis = w["start"], w["end"], w["basis"]
    lower, upper = utc_midnight(start), utc_midnight(end)
    tz = settings.DISPLAY_TIME_ZONE
    # Usage bars only: the page's costs are the stored figures below.
    days = deployment_usage_days_read(deployment, start=start, end=end)
    # The hours up to 2,000 of them (the default 30 days: no aggregation);
    # a longer range buckets two hours or more, where the stored rollups
    # stand for the hours.
    grid = grid_for(lower, upper)
    raw = rollups.page_read(deployment, start=lower, end=upper, grids=[grid])
    series = series_bucket(raw, grid)
    phase, phase_source = phase_share(series)
    # The grain of the cost view (day, week, month); the window is the range's.
    grain_form = EconomicsGrainForm(request.GET or None)
    grain = grain_form.grain_or_default()
    economics = deployment_economics_read(deployment, start=start, end=end, grain=grain)
    figure_rows = economics.rows
    currency = economics.window.currency if economics.window else "USD"
    links = {
        r.pk: reverse("economics:explanation", args=[r.pk])
        for r in figure_rows
        if r.flag
    }
    figures = {
        "cost": with_marks(
            telemetry_charts.cost_view(
                [r for r in figure_rows if r.currency == currency],
                currency=currency,
                links=links,
            ),
            deployment_marks_read(deployment, start=start, end=end),
        ),
        "heatmap": telemetry_charts.gpu_heatmap(
            device_grid_read(deployment, start=lower, end=upper), tz=tz
        ),
        "latency": telemetry_charts.latency_breakdown(
            series,
            phase=phase,
            phase_source=phase_source,
            tz=tz,
            slo_ttft_ms=deployment.slo_ttft_p95_ms,
            slo_itl_ms=deployment.slo_itl_p95_ms,
        ),
        "kv": telemetry_charts.kv_cache(series, tz=tz),
        "requests": charts.requests_by_reason_daily(days),
        "capacity": charts.capacity_daily(days),
    }
    # What a computed prompt token cost and what the prefix cache saved, on
    # the cost card's basis and currency (an estimate, labelled as one).
    prompt = None
    if economics.window is not None:
        prompt = prompt_economy_card(
            prompt_economy_read(
                deployment, start=lower, end=upper, cost=economics.window.cost
            ),
            currency,
        )
    return {
        "d": deployment,
        "prompt": prompt,
        "form": form,
        "window": w,
        "window_errors": errors,
        "presets": PRESETS,
        "preset_label": PRESETS[w["preset"]],
        "basis_label": BASES[basis],
        "start": start,
        "end": end,
        "last_day": end - timedelta(days=1),
        "figures_script": telemetry_charts.json_script(figures, "deployment-figures"),
        "has_data": not days.empty or not series.empty,
        "economics": present.deployment_context(economics),
        "idle_cards": idle_cards_context(start=start, end=end, deployment=deployment),
        "estimated_days": [
            r.period_start.strftime("%Y-%m-%d")
            for r in figure_rows
            if r.clock == "estimated"
        ],
        "provisional_days": [
            r.period_start.strftime("%Y-%m-%d")
            for r in figure_rows
            if r.clock == "provisional"
        ],
        "display_tz": tz,
        "grain": grain,
        "grain_form": grain_form,
        "slo_ttft": fmt.number(deployment.slo_ttft_p95_ms, 0)
        if deployment.slo_ttft_p95_ms
        else None,
        "slo_itl": fmt.number(deployment.slo_itl_p95_ms, 0)
        if deployment.slo_itl_p95_ms
        else None,
    }
