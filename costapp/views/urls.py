"""Product pages. Each area keeps its routes in its own package."""

from __future__ import annotations

from django.urls import include, path

from costapp.economics import views as economics
from costapp.views import help

urlpatterns = [
    path("", economics.overview, name="overview"),
    path("economics/", include("costapp.economics.urls")),
    path("fleet/", include("costapp.fleet.urls")),
    path("costs/", include("costapp.costs.urls")),
    path("telemetry/", include("costapp.telemetry.urls")),
    path("capacity/", include("costapp.capacity.urls")),
    path("alerts/", include("costapp.alerts.urls")),
    path("pipeline/", include("costapp.pipeline.urls")),
    path("help/", help.index, name="help_index"),
    path("help/screenshots/<str:file>", help.screenshot, name="help_screenshot"),
    path("help/<slug:topic>/", help.topic, name="help"),
    path("views/", include("costapp.saved_views.urls")),
]
