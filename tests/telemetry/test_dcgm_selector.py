"""Deployment.dcgm_selector: read by backfills and the refresh task unless a run
gives its own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from costapp.models import Deployment, DeploymentHour, DeviceHour, IngestRun
from costapp.sources.registry import source_for_run
from costapp.telemetry.services import telemetry_run_create
from tests.support.users import user_in
from tests.telemetry.conftest import BUDGET, PromServer
from tests.telemetry.synth import T0
from tests.telemetry.truth import check_deployment_hours, check_devices

pytestmark = pytest.mark.django_db

DAY = 86400
END = T0 + 3 * DAY
MIG_1 = 'Hostname="node-a",GPU_I_ID="1"'


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def deployment(name: str = "chat-v0", **fields: Any) -> Deployment:
    values = {
        "engine": "vllm",
        "model_name": "m",
        "gpu_type": "A100-80GB",
        "mig_profile": "3g.40gb",
        "prometheus_selector": 'namespace="batch"',
        **fields,
    }
    return Deployment.objects.create(name=name, **values)


@pytest.fixture
def prometheus_url(settings: Any) -> None:
    # Never contacted: building the source only reads the fleet.
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"


def test_a_run_without_a_dcgm_selector_uses_the_deployments_own(
    prometheus_url: None,
) -> None:
    deployment(dcgm_selector=MIG_1)
    deployment("chat-v1", prometheus_selector='namespace="chat"')
    run = telemetry_run_create(
        deployments=["chat-v0", "chat-v1"], start=at(T0), end=at(T0 + DAY)
    )
    # Only overrides are stored: editing the deployment later changes what the
    # refresh task reads.
    assert "dcgm_selectors" not in run.params
    targets = {t.name: t for t in source_for_run(run).targets}
    assert targets["chat-v0"].dcgm_selector == MIG_1
    assert targets["chat-v1"].dcgm_selector == ""


def test_a_dcgm_selector_given_for_a_run_replaces_the_deployments_for_that_run(
    prometheus_url: None,
) -> None:
    deployment(dcgm_selector=MIG_1)
    run = telemetry_run_create(
        deployments=["chat-v0"],
        start=at(T0),
        end=at(T0 + DAY),
        dcgm_selectors={"chat-v0": ' Hostname="node-b" '},
    )
    assert run.params["dcgm_selectors"] == {"chat-v0": 'Hostname="node-b"'}
    (target,) = source_for_run(run).targets
    assert target.dcgm_selector == 'Hostname="node-b"'
    # An empty override is no override.
    blank = telemetry_run_create(
        deployments=["chat-v0"],
        start=at(T0),
        end=at(T0 + DAY),
        dcgm_selectors={"chat-v0": "  "},
    )
    assert source_for_run(blank).targets[0].dcgm_selector == MIG_1


def test_the_deployment_page_shows_both_selectors(
    prometheus_url: None, client: Client
) -> None:
    deployment(dcgm_selector=MIG_1)
    deployment("chat-v1", prometheus_selector='namespace="chat"')
    client.force_login(user_in("lead", "tech lead"))
    page = client.get("/telemetry/chat-v0/").content.decode()
    assert "Hostname=&quot;node-a&quot;,GPU_I_ID=&quot;1&quot;" in page
    assert "namespace=&quot;batch&quot;" in page
    bare = client.get("/telemetry/chat-v1/").content.decode()
    assert "none set: GPU-seconds are replicas seen" in bare
    index = client.get("/telemetry/").content.decode()
    assert "GPU_I_ID=&quot;1&quot;" in index


@pytest.mark.integration
def test_the_refresh_task_reads_gpus_through_the_deployments_dcgm_selector(
    settings: Any, prometheus: PromServer
) -> None:
    import time_machine

    from costapp.telemetry.tasks import telemetry_refresh_task

    settings.PROMETHEUS_URL = prometheus.url
    settings.PROMETHEUS_MAX_SAMPLES = BUDGET
    settings.PROMETHEUS_TIMEOUT_S = 10.0
    v0 = deployment(dcgm_selector=MIG_1)
    with time_machine.travel(at(END - 1800), tick=False):
        (run_id,) = telemetry_refresh_task()
    run = IngestRun.objects.get(pk=run_id)
    assert run.status == IngestRun.SUCCEEDED, run.error
    devices = DeviceHour.objects.filter(deployment=v0)
    assert devices.count() == 3  # MIG instance 1, the last three hours
    assert set(devices.values_list("gpu_instance_id", flat=True)) == {"1"}
    assert check_devices(prometheus.truth, devices, END - 3 * 3600, END) == 3
    # GPU-seconds come from the MIG instance seen (3/7 of a GPU), as checked
    # against the generated truth.
    hours = DeploymentHour.objects.filter(deployment=v0)
    assert check_deployment_hours(
        prometheus.truth, "chat-v0", hours, END - 3 * 3600, END
    )
