"""Routes of saved views, under /views/."""

from __future__ import annotations

from django.urls import path

from costapp.saved_views import views

app_name = "saved_views"

urlpatterns = [
    path("", views.saved_list, name="list"),
    path("new/", views.saved_new, name="new"),
]
