"""The fleet: pools of GPU nodes and the inference deployments that run on them."""

from __future__ import annotations

from django.db import models

from costapp.catalog import mig_slices_per_gpu

ENGINES = [("vllm", "vLLM"), ("sglang", "SGLang"), ("tgi", "TGI")]


class Pool(models.Model):
    """A shared node group (e.g. an EKS managed node group of p5 nodes).

    Its bill lines are split between the deployments that ran on it in
    proportion to ``allocation_key``; node-hours nobody used become the pool's
    ``__idle__`` line.
    """

    ALLOCATION_KEYS = [("gpu_hours", "measured GPU-hours"), ("requests", "requests")]

    name = models.SlugField(max_length=100, unique=True)
    instance_type = models.CharField(max_length=64)
    region = models.CharField(max_length=32, default="us-east-1")
    gpu_type = models.CharField(max_length=32)
    gpus_per_node = models.PositiveSmallIntegerField(default=8)
    allocation_key = models.CharField(
        max_length=16, choices=ALLOCATION_KEYS, default="gpu_hours"
    )
    # Bill lines that belong to the pool as a whole (same rule shape as a
    # deployment's, see Deployment.cost_rules).
    cost_rules = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return self.name


class Deployment(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    team = models.CharField(max_length=100, blank=True)
    engine = models.CharField(max_length=16, choices=ENGINES, default="vllm")
    engine_version = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200)
    gpu_type = models.CharField(max_length=32)
    # Nominal size from the fleet file; cost uses what telemetry measured.
    gpu_count = models.PositiveSmallIntegerField(default=1)
    tensor_parallel_size = models.PositiveSmallIntegerField(default=1)
    mig_profile = models.CharField(max_length=32, blank=True)
    instance_type = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=32, default="us-east-1")
    account_id = models.CharField(max_length=32, blank=True)
    # PromQL label matchers without braces, e.g. 'namespace="chat",job="vllm"'.
    prometheus_selector = models.CharField(max_length=500, blank=True)
    # Matchers for the DCGM exporter series of this deployment's GPUs (the
    # exporter labels by host/pod, not by the engine's labels).
    dcgm_selector = models.CharField(max_length=500, blank=True)
    # Prefill/decode disaggregation: matchers that pick the prefill engines
    # among the series ``prometheus_selector`` matches; the others are the
    # decode engines. Both see every request, so requests and output tokens
    # are counted on the decode side and prompt tokens on the prefill side
    # (docs/telemetry.md, "Disaggregated deployments"). Blank: one pool.
    prefill_selector = models.CharField(max_length=500, blank=True)
    # Which bill lines are this deployment's: a list of
    # {"tag": {"key": k, "value": v}} | {"usage_type": u} | {"resource_id": r}.
    cost_rules = models.JSONField(default=list, blank=True)
    pool = models.ForeignKey(
        Pool,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="deployments",
    )
    # Unit-cost SLA inputs used by capacity what-ifs and headroom.
    # The vLLM serving arguments the fleet file declares (``serving:``:
    # max_model_len, max_num_seqs, ...), as the engine was started; the
    # capacity pages take them where the engine's metrics do not say.
    serving_args = models.JSONField(default=dict, blank=True)
    slo_ttft_p95_ms = models.PositiveIntegerField(null=True, blank=True)
    slo_itl_p95_ms = models.PositiveIntegerField(null=True, blank=True)
    # Share of the predicted capacity a replica should run at; headroom is
    # what serving leaves below it (analytics.idle.TARGET_UTILISATION).
    target_utilisation = models.FloatField(default=0.7)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def gpu_share(self) -> float:
        """GPUs one replica occupies: a MIG instance carries its slices over its
        GPU's (7, an A30's 4)."""
        if self.mig_profile:
            slices = int(self.mig_profile.split("g.", 1)[0])
            return slices / mig_slices_per_gpu(self.gpu_type)
        return float(self.tensor_parallel_size)
