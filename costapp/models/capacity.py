from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


class Calibration(models.Model):
    """Measurements a capacity prediction rests on, per target and shape."""

    KINDS = [
        ("engine_bench", "vllm bench result"),
        ("telemetry_fit", "fit from telemetry"),
        ("hardware_constants", "hardware constants (harness)"),
    ]

    kind = models.CharField(max_length=24, choices=KINDS)
    gpu_type = models.CharField(max_length=32)
    mig_profile = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    weight_dtype = models.CharField(max_length=16, blank=True)
    kv_dtype = models.CharField(max_length=16, blank=True)
    tensor_parallel_size = models.PositiveSmallIntegerField(default=1)
    engine_version = models.CharField(max_length=32, blank=True)
    payload = models.JSONField()  # the validated calibration file
    fit_error = models.FloatField(null=True, blank=True)
    source = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.gpu_type}{(' ' + self.mig_profile) if self.mig_profile else ''} {self.model_name}"


def _share_token() -> str:
    return secrets.token_urlsafe(16)


class Scenario(models.Model):
    """A saved what-if: the inputs, the result, shareable by link."""

    name = models.CharField(max_length=200)
    deployment = models.ForeignKey(
        "costapp.Deployment", null=True, blank=True, on_delete=models.SET_NULL
    )
    inputs = models.JSONField()
    result = models.JSONField(default=dict, blank=True)
    share_token = models.CharField(max_length=32, unique=True, default=_share_token)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name
