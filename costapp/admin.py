from __future__ import annotations

from django.contrib import admin

from costapp.fleet.forms import DeploymentForm
from costapp.models import (
    Calibration,
    CostLine,
    Deployment,
    IngestRun,
    Pool,
    RateCard,
    Scenario,
)


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    # Same rules as the fleet file (costapp/fleet/validation.py).
    form = DeploymentForm
    list_display = [
        "name",
        "team",
        "engine",
        "model_name",
        "gpu_type",
        "mig_profile",
        "pool",
    ]
    list_filter = ["team", "engine", "gpu_type"]
    search_fields = ["name", "model_name", "team"]


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "instance_type",
        "gpu_type",
        "gpus_per_node",
        "allocation_key",
    ]


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    list_display = [
        "gpu_type",
        "instance_type",
        "region",
        "kind",
        "price",
        "effective_from",
    ]
    list_filter = ["kind", "gpu_type", "region"]


@admin.register(CostLine)
class CostLineAdmin(admin.ModelAdmin):
    list_display = [
        "period_start",
        "account_id",
        "service",
        "usage_type",
        "record_type",
        "amortized_cost",
        "unblended_cost",
        "estimated",
        "source",
    ]
    list_filter = ["source", "record_type", "estimated", "granularity"]
    date_hierarchy = "period_start"


@admin.register(IngestRun)
class IngestRunAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "source",
        "target",
        "status",
        "steps_done",
        "steps_total",
        "rows_written",
        "api_requests",
    ]
    list_filter = ["source", "status"]


admin.site.register(Calibration)
admin.site.register(Scenario)
