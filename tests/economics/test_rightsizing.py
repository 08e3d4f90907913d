"""Rightsizing on the demo: replicas the SLA needs at each deployment's peak
hour against the replicas that ran, from the same capacity per replica the
idle page's headroom is priced with, and that headroom's dollars, the same on
the page, in the API and in the stored idle figures."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import Sum
from django.test import Client

from costapp.api.tokens import api_token_create
from costapp.economics.idle.rightsizing import HEADROOM_DAYS, rightsizing_read
from costapp.formatting import MISSING
from costapp.models import Deployment, DeploymentHour, IngestRun
from costapp.models.economics import IdleFigure
from tests.support.demo_data import demo_for_module
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
NOW = END + timedelta(hours=1, minutes=20)


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[IngestRun]:
    with demo_for_module(django_db_blocker, end=END, days=14) as run:
        yield run


@pytest.fixture
def now(demo: IngestRun) -> Iterator[datetime]:
    with time_machine.travel(NOW, tick=False):
        yield NOW


def test_every_deployment_is_sized_at_its_peak_hour_from_the_headroom_capacity(
    now: datetime,
) -> None:
    rows = {r.deployment: r for r in rightsizing_read(now=now)}
    assert set(rows) == set(Deployment.objects.values_list("name", flat=True))
    for name, r in rows.items():
        assert r.capacity_per_replica and r.requests_per_s and r.peak_hour, name
        assert r.peak_hour < END + timedelta(hours=1)  # a complete hour
        # The capacity the idle page's headroom was priced with, that day.
        stored = IdleFigure.objects.get(
            scope="deployment",
            name=name,
            kind="headroom",
            day=END.date() - timedelta(1),
        )
        assert r.capacity_per_replica == pytest.approx(stored.capacity_per_replica)
        assert r.needed_at_sla == math.ceil(r.requests_per_s / r.capacity_per_replica)
        assert r.recommended == math.ceil(
            r.requests_per_s / (r.capacity_per_replica * r.target_utilisation)
        )
        peak = DeploymentHour.objects.get(deployment__name=name, hour=r.peak_hour)
        assert r.replicas_running == peak.replicas_mean
        assert r.requests_per_s == pytest.approx(peak.requests / 3600)
        assert r.change == r.recommended - r.replicas_running
        headroom = IdleFigure.objects.filter(
            scope="deployment",
            name=name,
            kind="headroom",
            day__gte=END.date() - timedelta(HEADROOM_DAYS),
            day__lt=END.date() + timedelta(1),
        ).aggregate(total=Sum("amount"))["total"]
        assert r.headroom_cost == headroom and r.headroom_days_known == 14
    # The demo's classifier runs far more L4s than its load needs.
    assert rows["classify"].change is not None and rows["classify"].change <= -1
    assert (
        next(r.deployment for r in rightsizing_read(now=now))
        == max(rows.values(), key=lambda r: r.headroom_cost or Decimal(0)).deployment
    )


def test_the_page_and_the_api_say_the_same_to_a_reader(now: datetime) -> None:
    reader = user_in("rightsizing-reader", "finance")
    client = Client()
    client.force_login(reader)
    page = client.get("/economics/rightsizing/")
    assert page.status_code == 200
    html = page.content.decode()
    classify = next(r for r in rightsizing_read(now=now) if r.deployment == "classify")
    fewer = int(-(classify.change or 0))
    assert f"classify could run {fewer} fewer replicas" in html
    assert f'data-value="{classify.headroom_cost}"' in html
    assert "/capacity/" not in html  # a reader may not open the what-if
    token = api_token_create(
        user=reader, name="t", scopes=("api",), expires_at=NOW + timedelta(days=1)
    ).secret
    api = Client().get(
        "/api/v1/rightsizing/", headers={"authorization": f"Bearer {token}"}
    )
    assert api.status_code == 200
    found = {r["deployment"]: r for r in api.json()["results"]}
    assert Decimal(found["classify"]["headroom_cost"]) == classify.headroom_cost
    assert found["classify"]["recommended"] == classify.recommended
    assert found["classify"]["change"] == classify.change


def test_a_user_without_the_right_is_refused_page_and_api(now: datetime) -> None:
    nobody = user_in("rightsizing-nobody")
    client = Client()
    client.force_login(nobody)
    assert client.get("/economics/rightsizing/").status_code == 403
    token = api_token_create(
        user=nobody, name="t", scopes=("api",), expires_at=NOW + timedelta(days=1)
    ).secret
    api = Client().get(
        "/api/v1/rightsizing/", headers={"authorization": f"Bearer {token}"}
    )
    assert api.status_code == 403


def test_a_deployment_without_telemetry_is_missing_never_zero(now: datetime) -> None:
    Deployment.objects.create(
        name="new-one", model_name="meta-llama/Llama-3.1-8B-Instruct", gpu_type="L4"
    )
    row = next(r for r in rightsizing_read(now=now) if r.deployment == "new-one")
    assert row.requests_per_s is None and row.recommended is None
    assert row.change is None and row.headroom_cost is None
    assert row.problem == "no telemetry hours in the last 7 days"
    client = Client()
    client.force_login(user_in("rightsizing-lead", "tech lead"))
    html = client.get("/economics/rightsizing/").content.decode()
    cells = re.search(r'data-series="deployment/new-one".*?</tr>', html, re.S)
    assert cells is not None
    assert f'data-col="recommended">{MISSING}' in cells.group(0)
    assert "$0" not in cells.group(0)
