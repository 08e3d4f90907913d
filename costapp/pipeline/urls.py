"""Routes of the pipeline page, under /pipeline/."""

from __future__ import annotations

from django.urls import path

from costapp.pipeline import views

app_name = "pipeline"

urlpatterns = [path("", views.status, name="status")]
