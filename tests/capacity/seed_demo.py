"""One deployment with what the what-if page starts from: discovery, a week's
peak traffic and rate cards. The test fixtures and the browser test's server
(``manage.py shell -c "import tests.capacity.seed_demo as s; s.seed()"``) both
seed it, so the page under test is the same in both.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from costapp.models import Deployment, DeploymentHour, EngineDiscovery, RateCard
from tests.support.users import user_in


def seed_chat(now: datetime) -> Deployment:
    """Llama-3.1-8B on one H100 with fp8 KV discovered and 48 hours of traffic."""
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
            "enable_prefix_caching": "True",
        },
    )
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=48)
    for i in range(48):
        requests = 3600 * (2 + (i % 24) / 4)  # peaks at 7.75 req/s at i=23, 47
        DeploymentHour.objects.create(
            deployment=deployment,
            hour=start + timedelta(hours=i),
            requests_stop=requests * 0.9,
            requests_length=requests * 0.1,
            prompt_tokens=requests * 800,
            generation_tokens=requests * 200,
            replicas_mean=1,
            gpu_seconds=3600,
        )
    # An hour with no finished requests must not divide by zero.
    DeploymentHour.objects.create(
        deployment=deployment,
        hour=start - timedelta(hours=1),
        replicas_mean=1,
    )
    RateCard.objects.create(
        gpu_type="H100-SXM",
        instance_type="p5.48xlarge",
        gpus_per_unit=8,
        price=Decimal("55.04"),
        effective_from=date(2025, 6, 1),
        source="test",
    )
    RateCard.objects.create(
        gpu_type="H200",
        instance_type="p5en.48xlarge",
        gpus_per_unit=8,
        price=Decimal("41.00"),
        effective_from=date(2025, 6, 1),
        source="test",
    )
    return deployment


def seed() -> None:
    user_in("lead", "tech lead", password="pw-for-the-browser-test")
    seed_chat(datetime.now(UTC))
