"""One deployment with what the what-if page starts from: discovery, a week's
peak traffic and rate cards. The test fixtures and the browser test's server
(``manage.py shell -c "import tests.capacity.seed_demo as s; s.seed()"``) both
seed it, so the page under test is the same in both.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from analytics.capacity.backtest import predicted_itl_s
from analytics.capacity.engine import step_model
from costapp.capacity import selectors
from costapp.catalog import LIST_PRICES
from costapp.models import (
    Deployment,
    DeploymentHour,
    EngineDiscovery,
    HistogramHour,
    RateCard,
)
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
    h200 = next(p for p in LIST_PRICES if p.gpu_type == "H200")
    RateCard.objects.create(
        gpu_type="H200",
        instance_type=h200.instance_type,
        gpus_per_unit=h200.gpus,
        price=h200.price_per_hour,
        effective_from=h200.effective_from,
        source=h200.source,  # the catalogue's own: a price it could not confirm
    )
    return deployment


ITL_BOUNDS = [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, None]


def declare_itl_curve(deployment: Deployment, factor: float) -> None:
    """Give every seeded hour a running batch and an ITL histogram whose mean is
    ``factor`` x the roofline at that batch (a declared curve, not the engine's)."""
    scenario = selectors.deployment_today(deployment).scenario
    assert scenario is not None
    model = step_model(scenario)
    rows = list(
        DeploymentHour.objects.filter(deployment=deployment, requests_stop__gt=0)
    )
    for i, row in enumerate(rows):
        batch = 4.0 + 4.0 * (i % 24)
        itl = factor * predicted_itl_s(model, scenario, batch)
        row.running_mean = batch * row.replicas_mean
        row.generation_tokens = batch / itl * 3600 * row.replicas_mean
        # Keep the seeded request shape (800 in, 200 out) for the new token count.
        requests = row.generation_tokens / 200
        row.requests_stop, row.requests_length = requests * 0.9, requests * 0.1
        row.prompt_tokens = requests * 800
        row.save()
        tokens = row.generation_tokens
        # Every token in the bucket that holds 1.2 x the mean.
        upper = next(b for b in ITL_BOUNDS if b is None or b >= itl * 1.2)
        cumulative = [
            0.0 if b is not None and b < upper else tokens for b in ITL_BOUNDS
        ]
        HistogramHour.objects.create(
            deployment=deployment,
            hour=row.hour,
            metric="itl",
            bounds=ITL_BOUNDS,
            cumulative_counts=cumulative,
            total_sum=itl * tokens,
            total_count=tokens,
        )


PROMPT_BOUNDS = [100, 200, 500, 1000, 2000, 5000, 10000, 20000, None]
# Share of requests per prompt bucket: most near 800 tokens, a long tail.
PROMPT_SHARES = [0.02, 0.08, 0.25, 0.35, 0.20, 0.075, 0.02, 0.005, 0.0]


def seed_prompt_histogram(deployment: Deployment) -> None:
    """A vllm:request_prompt_tokens histogram per seeded hour (PROMPT_SHARES)."""
    for row in DeploymentHour.objects.filter(deployment=deployment):
        n = row.requests
        if not n > 0:
            continue
        cumulative, total = [], 0.0
        for share in PROMPT_SHARES:
            total += share * n
            cumulative.append(round(total, 6))
        cumulative[-1] = n
        HistogramHour.objects.create(
            deployment=deployment,
            hour=row.hour,
            metric="prompt_tokens",
            bounds=PROMPT_BOUNDS,
            cumulative_counts=cumulative,
            total_sum=row.prompt_tokens,
            total_count=n,
        )


def seed() -> None:
    """The browser test's server: chat with telemetry from a curve 1.3 x the
    roofline (so the back-test has something to say) and prompt lengths."""
    user_in("lead", "tech lead", password="pw-for-the-browser-test")
    chat = seed_chat(datetime.now(UTC))
    declare_itl_curve(chat, 1.3)
    seed_prompt_histogram(chat)
