"""Telemetry at hourly grain (UTC), as ingested from Prometheus or the demo.

An hour without samples has no row: missing is not zero. Nullable gauges are
null when their series was absent, so "no KV-cache figure" never reads as 0%.
"""

from __future__ import annotations

from django.db import models

HISTOGRAM_METRICS = [
    ("ttft", "time to first token"),
    ("itl", "inter-token latency"),
    ("e2e", "end-to-end latency"),
    ("queue", "queue time"),
    ("prefill", "prefill time"),
    ("decode", "decode time"),
    ("prompt_tokens", "prompt tokens per request"),
    ("generation_tokens", "generation tokens per request"),
]


class DeploymentHour(models.Model):
    deployment = models.ForeignKey("costapp.Deployment", on_delete=models.CASCADE)
    hour = models.DateTimeField()  # UTC, start of the hour
    # Finished requests by finished_reason; aborted ones are not requests but
    # their tokens still cost.
    requests_stop = models.FloatField(default=0)
    requests_length = models.FloatField(default=0)
    requests_aborted = models.FloatField(default=0)
    prompt_tokens = models.FloatField(default=0)
    generation_tokens = models.FloatField(default=0)
    # Engines and GPUs actually up (not the fleet file's nominal count). Null
    # when no replica count was scraped for the hour: unknown, never 0 (0 is
    # a deployment scaled to zero).
    replicas_mean = models.FloatField(null=True, blank=True)
    replicas_max = models.FloatField(null=True, blank=True)
    # GPU-equivalent seconds: a MIG instance counts slices/7 of a GPU. Null
    # when they could not be measured (a DCGM selector that matched nothing in
    # the hour, or no replica count): unknown, never 0, or cost reads $0.
    gpu_seconds = models.FloatField(null=True, blank=True)
    kv_cache_usage_mean = models.FloatField(null=True, blank=True)
    kv_cache_usage_max = models.FloatField(null=True, blank=True)
    running_mean = models.FloatField(null=True, blank=True)
    running_max = models.FloatField(null=True, blank=True)
    waiting_mean = models.FloatField(null=True, blank=True)
    waiting_max = models.FloatField(null=True, blank=True)
    preemptions = models.FloatField(null=True, blank=True)
    prefix_cache_queries = models.FloatField(null=True, blank=True)
    prefix_cache_hits = models.FloatField(null=True, blank=True)
    # Prompt tokens by where they came from, as vLLM's
    # prompt_tokens_by_source counts them: computed here, hit in the local
    # prefix cache, transferred from another engine or an external cache.
    # Null where the engine does not split them (then only the prefix cache
    # hits above say what was not computed). vLLM counts a fully cached
    # request's last token twice (it is recomputed), so the three add up to
    # prompt_tokens plus one per such request.
    prompt_tokens_computed = models.FloatField(null=True, blank=True)
    prompt_tokens_cache_hit = models.FloatField(null=True, blank=True)
    prompt_tokens_transferred = models.FloatField(null=True, blank=True)
    # True when counts come from raw counter samples (exact), False when from
    # PromQL increase() (extrapolated, close but not exact).
    counts_exact = models.BooleanField(default=True)
    samples = models.PositiveIntegerField(default=0)
    # The newest sample seen in the hour: staleness is measured from it (an
    # hour's start would fire up to an hour late). Null: not known.
    last_sample_at = models.DateTimeField(null=True, blank=True)
    # The run that last wrote the row; its start is when the hour was read,
    # and an hour read before its end plus the settle delay is not complete.
    run = models.ForeignKey(
        "costapp.IngestRun", null=True, blank=True, on_delete=models.SET_NULL
    )

    NATURAL_KEY = ("deployment", "hour")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "hour"], name="deploymenthour_natural_key"
            )
        ]
        indexes = [models.Index(fields=["hour"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.hour:%Y-%m-%d %H:00}"

    @property
    def requests(self) -> float:
        return self.requests_stop + self.requests_length


class DeviceHour(models.Model):
    """One GPU or MIG instance for one hour (DCGM exporter)."""

    deployment = models.ForeignKey(
        "costapp.Deployment", null=True, blank=True, on_delete=models.SET_NULL
    )
    hostname = models.CharField(max_length=200)
    gpu_uuid = models.CharField(max_length=64)
    gpu_index = models.PositiveSmallIntegerField(default=0)
    gpu_model = models.CharField(max_length=100, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    gpu_instance_id = models.CharField(max_length=8, blank=True)
    hour = models.DateTimeField()
    # DCGM_FI_DEV_GPU_UTIL is absent on MIG instances (null then).
    gpu_util_mean = models.FloatField(null=True, blank=True)
    gr_engine_active_mean = models.FloatField(null=True, blank=True)
    dram_active_mean = models.FloatField(null=True, blank=True)
    fb_used_mib_mean = models.FloatField(null=True, blank=True)
    fb_free_mib_mean = models.FloatField(null=True, blank=True)
    # MIG rows repeat the parent GPU's power: never sum them per instance.
    power_w_mean = models.FloatField(null=True, blank=True)
    energy_j = models.FloatField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=0)
    run = models.ForeignKey(
        "costapp.IngestRun", null=True, blank=True, on_delete=models.SET_NULL
    )

    NATURAL_KEY = ("hostname", "gpu_uuid", "gpu_instance_id", "hour")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hostname", "gpu_uuid", "gpu_instance_id", "hour"],
                name="devicehour_natural_key",
            )
        ]
        indexes = [models.Index(fields=["deployment", "hour"])]

    def __str__(self) -> str:
        return f"{self.hostname} {self.gpu_uuid} {self.gpu_instance_id} {self.hour:%Y-%m-%d %H:00}"


class HistogramHour(models.Model):
    """Bucket increases of one latency/size histogram over one hour.

    Stored as cumulative counts per upper bound (``le``), so hours, deployments
    and teams can be summed and any percentile computed afterwards; percentiles
    themselves cannot be re-aggregated.
    """

    deployment = models.ForeignKey("costapp.Deployment", on_delete=models.CASCADE)
    hour = models.DateTimeField()
    metric = models.CharField(max_length=24, choices=HISTOGRAM_METRICS)
    # Upper bounds in seconds (or tokens), last one +Inf stored as null in JSON.
    bounds = models.JSONField()
    cumulative_counts = models.JSONField()
    total_sum = models.FloatField(default=0)
    total_count = models.FloatField(default=0)
    run = models.ForeignKey(
        "costapp.IngestRun", null=True, blank=True, on_delete=models.SET_NULL
    )

    NATURAL_KEY = ("deployment", "hour", "metric")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "hour", "metric"],
                name="histogramhour_natural_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.metric} {self.hour:%Y-%m-%d %H:00}"


class EngineDiscovery(models.Model):
    """What telemetry says runs today: series found and the engine's config.

    Capacity what-ifs start from this (``vllm:cache_config_info`` labels:
    block_size, cache_dtype, gpu_memory_utilization, num_gpu_blocks, ...).
    """

    deployment = models.OneToOneField(
        "costapp.Deployment", on_delete=models.CASCADE, related_name="discovery"
    )
    observed_at = models.DateTimeField()
    engine = models.CharField(max_length=16)
    engine_generation = models.CharField(max_length=16, blank=True)
    cache_config = models.JSONField(default=dict, blank=True)
    series_found = models.JSONField(default=list, blank=True)
    series_missing = models.JSONField(default=list, blank=True)
    label_sets = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.engine} {self.observed_at:%Y-%m-%d %H:%M}"
