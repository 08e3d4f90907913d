from __future__ import annotations

from django.urls import path

from costapp.telemetry import views

app_name = "telemetry"
urlpatterns = [
    path("", views.index, name="index"),
    path("<slug:name>/", views.deployment, name="deployment"),
]
