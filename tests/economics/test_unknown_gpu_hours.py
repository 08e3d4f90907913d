"""GPU-hours telemetry could not measure: the provisional cost is missing and
says why; a pool member is allocated at its nominal GPUs, labelled."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from costapp.costs.selectors import usage_days_read
from costapp.economics.selectors import deployment_days_read
from costapp.models import Deployment, DeploymentHour, RateCard

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

DAY = date(2026, 11, 20)


@pytest.fixture
def chat() -> Deployment:
    RateCard.objects.create(
        gpu_type="H100-SXM",
        instance_type="p5.48xlarge",
        gpus_per_unit=8,
        price=Decimal("55.04"),
        effective_from=date(2025, 6, 1),
        source="test",
    )
    return Deployment.objects.create(
        name="chat",
        model_name="m",
        gpu_type="H100-SXM",
        gpu_count=4,
        instance_type="p5.48xlarge",
    )


def hour(dep: Deployment, i: int, gpu_seconds: float | None) -> None:
    DeploymentHour.objects.create(
        deployment=dep,
        hour=datetime(2026, 11, 20, tzinfo=UTC) + timedelta(hours=i),
        requests_stop=1000,
        requests_length=0,
        prompt_tokens=1_000_000,
        generation_tokens=100_000,
        replicas_mean=1,
        gpu_seconds=gpu_seconds,
    )


def test_a_day_with_an_hour_of_unknown_gpu_seconds_has_no_provisional_cost(
    chat: Deployment,
) -> None:
    hour(chat, 0, 4 * 3600.0)
    hour(chat, 1, None)
    (day,) = deployment_days_read(start=DAY, end=DAY + timedelta(days=1))
    assert day.cost is None
    assert day.gpu_hours != day.gpu_hours  # NaN: unknown, not 4.0 and not 0
    assert day.missing == "GPU-hours unknown for 1 of 2 hours"


def test_a_fully_measured_day_is_priced_from_the_rate_card(chat: Deployment) -> None:
    hour(chat, 0, 4 * 3600.0)
    (day,) = deployment_days_read(start=DAY, end=DAY + timedelta(days=1))
    assert day.cost == Decimal("27.520000000000")  # 4 GPU-h x 55.04 / 8
    assert day.missing == ""


def test_a_billed_day_keeps_its_bill_whatever_telemetry_measured(
    chat: Deployment,
) -> None:
    hour(chat, 0, None)
    (day,) = deployment_days_read(
        start=DAY,
        end=DAY + timedelta(days=1),
        billed={("chat", DAY): Decimal("30.5")},
    )
    assert (day.cost, day.basis) == (Decimal("30.5"), "billed")


def test_pool_allocation_counts_unknown_hours_at_the_nominal_gpus(
    chat: Deployment,
) -> None:
    hour(chat, 0, 2 * 3600.0)
    hour(chat, 1, None)
    usage = usage_days_read(DAY, DAY + timedelta(days=1))[("chat", DAY)]
    assert usage.gpu_hours == Decimal("6.000000")  # 2 measured + 4 nominal
    assert usage.nominal_hours == 1
