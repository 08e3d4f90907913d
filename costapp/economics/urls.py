"""Routes of the unit-economics area, under /economics/.

The overview itself stays at "/" with the URL name ``overview`` (the login
redirect uses it), so it is routed in ``costapp/views/urls.py``; the pages this
area grows (explanations, budgets, a scope's figures) go here.
"""

from __future__ import annotations

from django.urls import URLPattern

app_name = "economics"

urlpatterns: list[URLPattern] = []
