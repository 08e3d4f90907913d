"""Telemetry pages: backfill form and runs; one deployment's hours."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from costapp.access import requires
from costapp.models import Deployment
from costapp.tasks import ingest_runs_queue
from costapp.telemetry import selectors, services
from costapp.telemetry.forms import PROMETHEUS_MISSING, BackfillForm, WindowForm


@requires("costapp.view_fleet", write="costapp.run_backfill")
@require_http_methods(["GET", "POST"])
def index(request: HttpRequest) -> HttpResponse:
    form = BackfillForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        start, end = form.window()
        names = [d.name for d in form.cleaned_data["deployments"]]
        selector = form.cleaned_data["dcgm_selector"]
        try:
            run = services.telemetry_run_create(
                deployments=names,
                start=start,
                end=end,
                dcgm_selectors={n: selector for n in names} if selector else None,
                options={"scrape_interval_s": form.cleaned_data["scrape_interval_s"]},
                confirmed=form.cleaned_data["confirm"],
            )
        except services.TelemetryInputError as exc:
            field = exc.field if exc.field in form.fields else None
            form.add_error(field, str(exc))
        else:
            ingest_runs_queue([run])
            messages.success(request, f"Backfill run {run.pk} queued.")
            return redirect("telemetry:index")
    return render(
        request,
        "telemetry/index.html",
        {
            "form": form,
            "prometheus_missing": "" if settings.PROMETHEUS_URL else PROMETHEUS_MISSING,
            "runs": selectors.telemetry_runs(),
            "deployments": Deployment.objects.order_by("name"),
        },
    )


@requires("costapp.view_fleet")
def deployment(request: HttpRequest, name: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, name=name)
    start, end, notes = WindowForm(request.GET).window(selectors.default_window(dep))
    hours, window_latency = selectors.deployment_hours(dep, start, end)
    return render(
        request,
        "telemetry/deployment.html",
        {
            "deployment": dep,
            "start": start,
            "end": end,
            "notes": notes,
            "hours": hours,
            "gpu_unknown": sum(1 for h in hours if h.row.gpu_seconds is None),
            "window_latency": window_latency,
            "devices": selectors.device_summary(dep, start, end),
            "discovery": selectors.discovery(dep),
        },
    )
