from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from costapp import access
from costapp.api import metrics
from costapp.forms import LoginForm
from costapp.views import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Prometheus scrapes /metrics; bearer token, no session (api.metrics).
    path("metrics", metrics.metrics, name="metrics"),
    path(
        "login/",
        auth_views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("home/", access.landing, name="landing"),
    path("admin/", admin.site.urls),
    # The JSON API (bearer tokens) and its token and docs pages.
    path("api/", include("costapp.api.urls")),
    path("", include("costapp.views.urls")),
]

# A logged-in user without the right sees what is missing and whom to ask.
handler403 = access.forbidden
