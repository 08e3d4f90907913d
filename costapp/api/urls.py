"""Routes under /api/: the v1 endpoints (bearer token, no session) and the
pages a logged-in user opens (tokens, schema, docs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.urls import path

from costapp.api import pages, views

app_name = "api"


def token_view(view_class: Any) -> Callable[..., Any]:
    """A DRF view for token holders: no login redirect (a missing token is a
    401), and CSRF stays on for unsafe methods (DRF exempts its views; the
    API takes no POST, so a cross-site form gets Django's 403 first)."""
    view = login_not_required(view_class.as_view())
    view.csrf_exempt = False  # type: ignore[attr-defined]
    return view


urlpatterns = [
    path("v1/unit-costs/", token_view(views.UnitCosts), name="unit_costs"),
    path("v1/baselines/", token_view(views.Baselines), name="baselines"),
    path("v1/spend/", token_view(views.Spend), name="spend"),
    path("v1/idle/", token_view(views.Idle), name="idle"),
    path("v1/moved/", token_view(views.Moved), name="moved"),
    path("v1/overview/", token_view(views.Overview), name="overview"),
    path("v1/budgets/", token_view(views.Budgets), name="budgets"),
    path("v1/rightsizing/", token_view(views.Rightsizing), name="rightsizing"),
    path("v1/alerts/events/", token_view(views.AlertEvents), name="alert_events"),
    path("v1/alerts/active/", token_view(views.ActiveAlerts), name="alerts_active"),
    path("v1/schema/", token_view(views.Schema), name="v1_schema"),
    path("tokens/", pages.tokens, name="tokens"),
    path("schema/", pages.schema, name="schema"),
    path("docs/", pages.docs, name="docs"),
]
