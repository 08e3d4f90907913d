"""Telemetry pages: backfill form and runs; one deployment's hours."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from analytics.downsample import grid_for
from analytics.errors import InvalidInput
from costapp import pagecache
from costapp.access import requires
from costapp.filters import PresetLink
from costapp.models import Deployment
from costapp.tasks import ingest_runs_queue
from costapp.telemetry import charts, rollups, selectors, series, services
from costapp.telemetry import table as table_html
from costapp.telemetry.forms import (
    PAGE_MAX_DAYS,
    PRESETS,
    PROMETHEUS_MISSING,
    BackfillForm,
    Window,
    WindowForm,
)


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
        except InvalidInput as exc:
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
    window = WindowForm(request.GET).window(selectors.default_window(dep))
    body = pagecache.body_render(
        request,
        "telemetry/_deployment_body.html",
        page="telemetry",
        # The window resolved now: a relative preset moves every hour.
        key=(dep.pk, window.start, window.end, window.in_progress, tuple(window.notes)),
        context=lambda: _deployment_context(dep, window),
    )
    return render(
        request, "telemetry/deployment.html", {"deployment": dep, "body": body}
    )


def _preset_links(window: Window) -> list[PresetLink]:
    """One link per preset; the hour (or day) in progress stays in or out as
    it is now, so a link is the same page a moment later."""
    extra = [("partial", "1")] if window.in_progress and window.preset else []
    return [
        PresetLink(
            key, label, "?" + urlencode([("preset", key), *extra]), key == window.preset
        )
        for key, label in PRESETS.items()
    ]


def _deployment_context(dep: Deployment, window: Window) -> dict[str, Any]:
    """Everything the telemetry page's body shows: read only when the page
    cache has no body for this data, query string, day and rights."""
    start, end, notes = window.start, window.end, window.notes
    tz = settings.DISPLAY_TIME_ZONE
    # Read once: bucketed for the charts and the table, summed for the window.
    chart_grid, table_grid = grid_for(start, end), series.table_grid(start, end)
    raw = rollups.page_read(
        dep,
        start=start,
        end=end,
        grids=(chart_grid, table_grid),
        metrics=selectors.LATENCY_METRICS,
    )
    chart_series = series.series_bucket(raw, chart_grid)
    phase, phase_source = series.phase_share(chart_series)
    # The table shows p95s only.
    table = series.series_bucket(raw, table_grid, (0.95,))
    rows = series.table_rows(table)
    for row in rows:
        row["cells"] = table_html.row_html(row)
    figures = {
        "traffic": charts.traffic(chart_series, tz=tz),
        "latency": charts.latency_breakdown(
            chart_series,
            phase=phase,
            phase_source=phase_source,
            tz=tz,
            slo_ttft_ms=dep.slo_ttft_p95_ms,
            slo_itl_ms=dep.slo_itl_p95_ms,
        ),
        "kv": charts.kv_cache(chart_series, tz=tz),
    }
    found = selectors.discovery(dep)
    return {
        "deployment": dep,
        "start": start,
        "end": end,
        "last_day": end - timedelta(days=1),
        "window": window,
        "presets": _preset_links(window),
        "preset_choices": WindowForm.base_fields["preset"].choices,  # type: ignore[attr-defined]
        "notes": notes,
        "max_days": PAGE_MAX_DAYS,
        "rows": rows,
        "table_hourly": table.grid.width < timedelta(days=1),
        "table_width": charts.width_label(table.grid.width),
        "chart_width": charts.width_label(chart_series.grid.width),
        "hours_total": sum(r["hours"] for r in rows),
        "gpu_unknown": sum(r["gpu_unknown"] for r in rows),
        "figures_script": charts.json_script(figures, "telemetry-figures"),
        "has_hours": not chart_series.empty,
        "window_latency": selectors.window_latency(dep, start, end, raw),
        "devices": selectors.device_summary(dep, start, end),
        "discovery": found,
        "dcgm_exporter": selectors.dcgm_exporter_read(found),
    }
