from __future__ import annotations

from django.urls import path

from costapp.fleet import views

app_name = "fleet"

urlpatterns = [
    path("", views.deployment_list, name="deployments"),
    path("<slug:name>/", views.deployment_detail, name="deployment"),
]
