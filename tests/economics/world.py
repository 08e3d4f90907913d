"""A small fleet whose figures can be computed by hand.

- ``solo`` (team ``t1``, outside pools): 1 GPU all day, billed $0.80 per
  GPU-hour ($19.20 a day) by a tagged line; the rate card says $0.944 (18%
  above the bill, the case seen in the demo).
- pool ``p`` (one 8-GPU node, $614.40 a day, allocated by GPU-hours) shared by
  ``a`` (team ``t2``, 2 GPUs) and ``b`` (team ``t3``, 1 GPU): 120 of its 192
  GPU-hours a day are idle.
- Days 0..32 are billed (day 32 still estimated); days 33 and 34 have no bill
  yet (provisional). Day 10: ``solo`` finishes no request. Day 12: ``solo``
  gets a $30 credit (its day costs -$10.80). Hour 05:00 of day 25 of ``a`` is
  left out (a late telemetry hour the tests add).

Traffic has a weekly shape (weekends 0.6x) and no noise, so nothing but what
a test changes can leave the baseline's band.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    EngineDiscovery,
    Pool,
    RateCard,
)

START = date(2026, 9, 7)  # a Monday
DAYS = 35
BILLED_DAYS = 33
ESTIMATED_DAY = 32
ZERO_REQUEST_DAY = 10
CREDIT_DAY = 12
LATE_DAY, LATE_HOUR = 25, 5
ACCOUNT = "123456789012"
TAG = "costapp:workload"
SOLO_DAY_BILL = Decimal("19.200000000000")
POOL_DAY_BILL = Decimal("614.400000000000")
CREDIT = Decimal("-30.000000000000")
WEEKLY = (1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 0.6)
BASE_REQUESTS = {"solo": 100.0, "a": 300.0, "b": 80.0}  # per hour, weekdays
GPUS = {"solo": 1, "a": 2, "b": 1}


@dataclass(frozen=True)
class World:
    solo: Deployment
    a: Deployment
    b: Deployment
    pool: Pool


def day_start(n: int) -> datetime:
    return datetime.combine(START + timedelta(days=n), datetime.min.time(), UTC)


def requests_per_hour(name: str, n: int) -> float:
    if name == "solo" and n == ZERO_REQUEST_DAY:
        return 0.0
    return BASE_REQUESTS[name] * WEEKLY[(START + timedelta(days=n)).weekday()]


def hour_row(dep: Deployment, n: int, h: int) -> DeploymentHour:
    requests = requests_per_hour(dep.name, n)
    return DeploymentHour(
        deployment=dep,
        hour=day_start(n) + timedelta(hours=h),
        requests_stop=requests * 0.95,
        requests_length=requests * 0.05,
        prompt_tokens=requests * 1000.0,
        generation_tokens=requests * 200.0,
        replicas_mean=float(GPUS[dep.name]),
        replicas_max=float(GPUS[dep.name]),
        gpu_seconds=3600.0 * GPUS[dep.name],
    )


def bill_line(n: int, tag: str, amount: Decimal, **extra: object) -> CostLine:
    return CostLine(
        source="cost_explorer",
        account_id=ACCOUNT,
        granularity="day",
        period_start=day_start(n),
        service="Amazon Elastic Compute Cloud - Compute",
        usage_type=extra.pop("usage_type", "BoxUsage"),  # type: ignore[arg-type]
        record_type=extra.pop("record_type", "usage"),  # type: ignore[arg-type]
        tag_key=TAG,
        tag_value=tag,
        currency="USD",
        amortized_cost=amount,
        unblended_cost=amount,
        estimated=n == ESTIMATED_DAY,
        fetched_at=day_start(n + 2),
        **extra,  # type: ignore[arg-type]
    )


def build_world() -> World:
    pool = Pool.objects.create(
        name="p",
        instance_type="p4de.24xlarge",
        gpu_type="A100-80GB",
        gpus_per_node=8,
        cost_rules=[{"tag": {"key": TAG, "value": "p"}}],
    )
    solo = Deployment.objects.create(
        name="solo", team="t1", model_name="m", gpu_type="L4",
        instance_type="g6.xlarge", account_id=ACCOUNT,
        cost_rules=[{"tag": {"key": TAG, "value": "solo"}}],
    )  # fmt: skip
    a = Deployment.objects.create(
        name="a", team="t2", model_name="m", gpu_type="A100-80GB", gpu_count=2,
        instance_type="p4de.24xlarge", account_id=ACCOUNT, pool=pool,
    )  # fmt: skip
    b = Deployment.objects.create(
        name="b", team="t3", model_name="m", gpu_type="A100-80GB",
        instance_type="p4de.24xlarge", account_id=ACCOUNT, pool=pool,
    )  # fmt: skip
    RateCard.objects.create(
        gpu_type="L4", instance_type="g6.xlarge", unit="gpu_hour",
        price=Decimal("0.944"), effective_from=START, source="test",
    )  # fmt: skip
    RateCard.objects.create(
        gpu_type="A100-80GB", instance_type="p4de.24xlarge", unit="gpu_hour",
        price=Decimal("3.776"), effective_from=START, source="test",
    )  # fmt: skip
    hours = [
        hour_row(dep, n, h)
        for dep in (solo, a, b)
        for n in range(DAYS)
        for h in range(24)
        if not (dep.name == "a" and n == LATE_DAY and h == LATE_HOUR)
    ]
    DeploymentHour.objects.bulk_create(hours)
    lines = []
    for n in range(BILLED_DAYS):
        lines.append(bill_line(n, "solo", SOLO_DAY_BILL))
        lines.append(
            bill_line(
                n, "p", POOL_DAY_BILL, usage_quantity=Decimal(24), usage_unit="Hrs",
                usage_type="BoxUsage:p4de.24xlarge",
            )
        )  # fmt: skip
    lines.append(bill_line(CREDIT_DAY, "solo", CREDIT, record_type="credit"))
    CostLine.objects.bulk_create(lines)
    return World(solo=solo, a=a, b=b, pool=pool)


SOLO_MODEL = "meta-llama/Llama-3.2-3B-Instruct"


def solo_runs_a_catalogued_model(world: World, *, observed_at: datetime) -> None:
    """What headroom and solo's own paid idle need: a catalogued model on its
    L4 with SLOs, what vLLM reported it runs with (a 128k context would not fit
    the L4), and the instance-hours its bill says it paid (one g6.xlarge: one
    GPU)."""
    Deployment.objects.filter(name="solo").update(
        model_name=SOLO_MODEL, slo_ttft_p95_ms=500, slo_itl_p95_ms=100
    )
    EngineDiscovery.objects.create(
        deployment=world.solo, observed_at=observed_at, engine="vllm",
        cache_config={"max_model_len": "8192", "block_size": "16"},
    )  # fmt: skip
    CostLine.objects.filter(tag_value="solo", record_type="usage").update(
        usage_quantity=Decimal(24), usage_unit="Hrs"
    )
