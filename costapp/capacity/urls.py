"""Capacity what-ifs. Fixed paths come before ``<deployment>/`` so a deployment
named like a page cannot hide it."""

from __future__ import annotations

from django.urls import path

from costapp.capacity import views

app_name = "capacity"

urlpatterns = [
    path("", views.index, name="index"),
    path("mig/", views.mig, name="mig"),
    path("search/", views.search, name="search"),
    path("calibrations/", views.calibrations, name="calibrations"),
    path("scenarios/", views.scenarios, name="scenarios"),
    path("s/<slug:share_token>/", views.scenario_share, name="scenario_share"),
    path("s/<slug:share_token>/csv", views.scenario_csv, name="scenario_csv"),
    path("<slug:deployment>/", views.whatif, name="whatif"),
    path("<slug:deployment>/save", views.scenario_save, name="save"),
    path("<slug:deployment>/fit", views.calibration_fit, name="fit"),
]
