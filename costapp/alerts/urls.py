"""Routes of alerts, under /alerts/."""

from __future__ import annotations

from django.urls import path

from costapp.alerts import views

app_name = "alerts"

urlpatterns = [
    path("", views.rules, name="rules"),
    path("rules/<int:rule_id>/", views.rule, name="rule"),
    path("channels/", views.channels, name="channels"),
    path("channels/<int:channel_id>/", views.channel, name="channel"),
    path("silences/", views.silences, name="silences"),
    path("log/", views.log, name="log"),
]
