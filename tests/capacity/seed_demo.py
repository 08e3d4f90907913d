"""Seed a throwaway database with one deployment for the browser test.

Run as ``manage.py shell -c "import tests.capacity.seed_demo as s; s.seed()"``.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth.models import User

from costapp.models import Deployment, DeploymentHour, EngineDiscovery, RateCard


def seed() -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    User.objects.create_user("lead", password="pw-for-the-browser-test")
    deployment = Deployment.objects.create(
        name="chat",
        team="assistant",
        engine="vllm",
        engine_version="0.10.1",
        model_name="meta-llama/Llama-3.1-8B-Instruct",
        gpu_type="H100-SXM",
        tensor_parallel_size=1,
        instance_type="p5.48xlarge",
        slo_itl_p95_ms=60,
    )
    EngineDiscovery.objects.create(
        deployment=deployment,
        observed_at=now,
        engine="vllm",
        engine_generation="v1",
        cache_config={
            "block_size": "16",
            "cache_dtype": "auto",
            "gpu_memory_utilization": "0.9",
            "num_gpu_blocks": "27000",
        },
    )
    for i in range(1, 49):
        requests = 3600 * (2 + (i % 24) / 4)
        DeploymentHour.objects.create(
            deployment=deployment,
            hour=now - timedelta(hours=i),
            requests_stop=requests,
            prompt_tokens=requests * 800,
            generation_tokens=requests * 200,
            replicas_mean=1,
            gpu_seconds=3600,
        )
    for gpu, instance, price in (
        ("H100-SXM", "p5.48xlarge", "55.04"),
        ("H200", "p5en.48xlarge", "41.00"),
    ):
        RateCard.objects.create(
            gpu_type=gpu,
            instance_type=instance,
            gpus_per_unit=8,
            price=Decimal(price),
            effective_from=date(2025, 6, 1),
            source="seed",
        )
