"""Routes of the unit-economics area, under /economics/.

The overview itself stays at "/" with the URL name ``overview`` (the login
redirect uses it), so it is routed in ``costapp/views/urls.py``; /metrics is
routed at the top (``costapp/urls.py``) where Prometheus expects it.
"""

from __future__ import annotations

from django.urls import path

from costapp.economics import views

app_name = "economics"

urlpatterns = [
    path("explain/<int:figure_id>/", views.explanation, name="explanation"),
    path("budgets/", views.budgets, name="budgets"),
    path("idle/", views.idle, name="idle"),
    path("rightsizing/", views.rightsizing, name="rightsizing"),
    path("moved/", views.moved, name="moved"),
    path(
        "moved/<str:scope>/<str:name>/",
        views.moved_explanation,
        name="moved_explanation",
    ),
]
