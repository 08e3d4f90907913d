"""Stored per-bucket rollups of the telemetry hours (``costapp.telemetry.rollups``).

A rollup row holds two hours of one deployment summed so that re-summing rows
gives what summing the hours gives: counts summed, the paired sums each ratio
needs, gauges as (sum of known hourly means, how many, max), histogram bucket
increases per set of bounds. ``TelemetryRollupDay`` vouches for one
deployment's UTC day; any write to that day's deployment-hours or
histogram-hours deletes it in the writer's transaction (triggers, migration
0013), and the pages read the hours of a day without it instead.
"""

from __future__ import annotations

from django.db import models

# Columns summed over the hours (NaN/None: no hour of the bucket knew it).
ROLLUP_SUMS = (
    "hours", "extrapolated", "requests", "requests_stop", "requests_length",
    "requests_aborted", "prompt_tokens", "generation_tokens", "preemptions",
    "gpu_unknown",
    # Each ratio's two sides over the hours where both are known.
    "hits_paired", "queries_paired", "preemptions_paired", "requests_paired",
    "tokens_paired", "gpu_paired",
    "replicas_sum", "replicas_n", "kv_cache_usage_sum", "kv_cache_usage_n",
    "running_sum", "running_n", "waiting_sum", "waiting_n",
)  # fmt: skip
# Summed, but unknown (None) as soon as one hour is unknown.
ROLLUP_STRICT = ("gpu_seconds",)
ROLLUP_MAXIMA = ("replicas_max", "kv_cache_usage_max", "running_max", "waiting_max")
ROLLUP_FIELDS = (*ROLLUP_SUMS, *ROLLUP_STRICT, *ROLLUP_MAXIMA)


class TelemetryRollupDay(models.Model):
    """One deployment's UTC day whose rollups are stored and current."""

    deployment = models.ForeignKey("costapp.Deployment", on_delete=models.CASCADE)
    day = models.DateField()
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "day"], name="telemetryrollupday_natural_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.day}"


class TelemetryRollup(models.Model):
    """Two hours (``start`` .. +2 h, UTC) of one deployment's hours."""

    deployment = models.ForeignKey("costapp.Deployment", on_delete=models.CASCADE)
    day = models.DateField()  # UTC day of ``start``: the mark that vouches for it
    start = models.DateTimeField()
    hours = models.FloatField()
    extrapolated = models.FloatField(null=True)
    requests = models.FloatField(null=True)
    requests_stop = models.FloatField(null=True)
    requests_length = models.FloatField(null=True)
    requests_aborted = models.FloatField(null=True)
    prompt_tokens = models.FloatField(null=True)
    generation_tokens = models.FloatField(null=True)
    preemptions = models.FloatField(null=True)
    gpu_unknown = models.FloatField(null=True)
    hits_paired = models.FloatField(null=True)
    queries_paired = models.FloatField(null=True)
    preemptions_paired = models.FloatField(null=True)
    requests_paired = models.FloatField(null=True)
    tokens_paired = models.FloatField(null=True)
    gpu_paired = models.FloatField(null=True)
    replicas_sum = models.FloatField(null=True)
    replicas_n = models.FloatField(null=True)
    kv_cache_usage_sum = models.FloatField(null=True)
    kv_cache_usage_n = models.FloatField(null=True)
    running_sum = models.FloatField(null=True)
    running_n = models.FloatField(null=True)
    waiting_sum = models.FloatField(null=True)
    waiting_n = models.FloatField(null=True)
    gpu_seconds = models.FloatField(null=True)
    replicas_max = models.FloatField(null=True)
    kv_cache_usage_max = models.FloatField(null=True)
    running_max = models.FloatField(null=True)
    waiting_max = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "start"], name="telemetryrollup_natural_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.start:%Y-%m-%d %H:00}"


class HistogramRollup(models.Model):
    """Two hours of one histogram's bucket increases, per set of bounds (a
    bucket whose hours changed bounds holds one row per set)."""

    deployment = models.ForeignKey("costapp.Deployment", on_delete=models.CASCADE)
    day = models.DateField()
    start = models.DateTimeField()
    metric = models.CharField(max_length=24)
    # JSON arrays stored as text: the page reads them as text and decodes
    # them in one pass, and a jsonb column's cast to text was two thirds of
    # the read's database time.
    bounds = models.TextField()
    cumulative_counts = models.TextField()
    total_sum = models.FloatField()

    class Meta:
        indexes = [
            models.Index(
                fields=["deployment", "metric", "start"], name="histogramrollup_read"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.metric} {self.start:%Y-%m-%d %H:00}"
