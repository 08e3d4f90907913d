"""Product pages. Each area keeps its routes in its own package."""

from __future__ import annotations

from django.urls import include, path

from costapp.views import overview

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("fleet/", include("costapp.fleet.urls")),
    path("costs/", include("costapp.costs.urls")),
    path("telemetry/", include("costapp.telemetry.urls")),
    path("capacity/", include("costapp.capacity.urls")),
]
