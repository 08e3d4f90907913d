from __future__ import annotations

from django.urls import path

from costapp.costs import views

app_name = "costs"
urlpatterns = [
    path("", views.bills, name="bills"),
    path("reconciliation/", views.reconciliation, name="reconciliation"),
    path("breakdown/", views.breakdown, name="breakdown"),
    path("lines/", views.bill_lines, name="bill_lines"),
    path("lines.csv", views.bill_lines_csv, name="bill_lines_csv"),
    path("export.csv", views.export_csv, name="export"),
    path("export.zip", views.export_zip, name="export_zip"),
    path("export-summary.csv", views.export_summary, name="export_summary"),
    path(
        "reconciliation.csv",
        views.reconciliation_export,
        name="reconciliation_export",
    ),
    path("backfill/", views.backfill, name="backfill"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("focus/", views.focus_import, name="focus_import"),
]
