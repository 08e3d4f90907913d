"""Telemetry pages: backfill form and runs; one deployment's hours."""

from __future__ import annotations

from datetime import UTC, datetime, time

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from costapp.models import Deployment
from costapp.tasks import ingest_runs_queue
from costapp.telemetry import selectors, services
from costapp.telemetry.forms import BackfillForm


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
            )
        except services.TelemetryInputError as exc:
            form.add_error(None, str(exc))
        else:
            ingest_runs_queue([run])
            messages.success(request, f"Backfill run {run.pk} queued.")
            return redirect("telemetry:index")
    return render(
        request,
        "telemetry/index.html",
        {
            "form": form,
            "runs": selectors.telemetry_runs(),
            "deployments": Deployment.objects.order_by("name"),
        },
    )


def _day(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.combine(datetime.fromisoformat(value).date(), time(), UTC)
    except ValueError:
        return None


def deployment(request: HttpRequest, name: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, name=name)
    start, end = selectors.default_window(dep)
    start = _day(request.GET.get("start")) or start
    end = _day(request.GET.get("end")) or end
    error = ""
    if end <= start:
        error = f"end {end:%Y-%m-%d} is not after start {start:%Y-%m-%d}"
        start, end = selectors.default_window(dep)
    hours, window_latency = selectors.deployment_hours(dep, start, end)
    return render(
        request,
        "telemetry/deployment.html",
        {
            "deployment": dep,
            "start": start,
            "end": end,
            "error": error,
            "hours": hours,
            "window_latency": window_latency,
            "devices": selectors.device_hours(dep, start, end),
            "discovery": selectors.discovery(dep),
        },
    )
