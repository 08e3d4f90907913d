"""Deployment.dcgm_selector: read by backfills and the refresh task unless a run
gives its own."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from costapp.ingest import batches_write
from costapp.models import (
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    IngestRun,
)
from costapp.pipeline.runs import run_execute
from costapp.sources.base import Batch
from costapp.sources.prometheus import PrometheusConfig, PrometheusSource, Target
from costapp.sources.promql import Matcher, selector_parse
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


# -- a selector that matches nothing says why ----------------------------------


class Index:
    """The series index of /api/v1/series, over a fixed list of label sets
    (a unit test of the discovery's diagnosis; the integration test below
    asks a real Prometheus)."""

    def __init__(self, series: list[dict[str, str]]) -> None:
        self.all = series
        self.requests = 0

    def series(
        self, matchers: list[str], start_ms: int, end_ms: int
    ) -> list[dict[str, str]]:
        self.requests += 1
        (text,) = matchers
        wanted = selector_parse(text.strip("{}"))
        return [s for s in self.all if all(_matches(m, s) for m in wanted)]


def _matches(m: Matcher, labels: dict[str, str]) -> bool:
    value = labels.get(m.label, "")
    hit = re.fullmatch(m.value, value) if "~" in m.op else m.value == value
    return bool(hit) == (m.op in ("=", "=~"))


def exporter(host_label: str) -> list[dict[str, str]]:
    return [
        {
            "__name__": "DCGM_FI_DEV_FB_USED",
            "gpu": str(gpu),
            "UUID": f"GPU-{gpu}",
            host_label: "node-1",
        }
        for gpu in range(2)
    ]


def unmatched_warning(selector: str, series: list[dict[str, str]]) -> str:
    source = PrometheusSource(
        targets=[Target("chat", "vllm", 'namespace="chat"', 1.0, selector)],
        config=PrometheusConfig(url="http://127.0.0.1:9"),
    )
    source.client = Index(series)  # type: ignore[assignment]
    source.discover(T0, T0 + 3600)
    (warning,) = source.warnings
    return warning


def test_a_selector_written_for_hostname_names_the_label_the_exporter_carries() -> None:
    warning = unmatched_warning('Hostname="node-1"', exporter("hostname"))
    assert (
        'dcgm_selector Hostname="node-1" matched no series; the exporter\'s series '
        'carry hostname (not Hostname): write hostname="node-1"'
    ) in warning
    assert "GPU-hours unknown (not zero)" in warning


def test_a_selector_written_for_the_new_label_against_an_old_exporter() -> None:
    warning = unmatched_warning('hostname="node-1",gpu=~"0|1"', exporter("Hostname"))
    assert (
        "the exporter's series carry Hostname (not hostname): write "
        'Hostname="node-1",gpu=~"0|1"'
    ) in warning


def test_a_selector_on_a_label_no_series_carries_lists_the_labels() -> None:
    warning = unmatched_warning('node="node-1"', exporter("hostname"))
    assert (
        "the exporter's series carry no node (they carry UUID, gpu, hostname)"
        in warning
    )


def test_a_selector_on_a_value_no_series_has_lists_the_values() -> None:
    warning = unmatched_warning('hostname="node-2"', exporter("hostname"))
    assert "values the exporter's series carry: hostname: node-1" in warning


def test_the_run_keeps_the_exporter_generation_it_saw() -> None:
    source = PrometheusSource(
        targets=[Target("chat", "vllm", 'namespace="chat"', 1.0, 'hostname="node-1"')],
        config=PrometheusConfig(url="http://127.0.0.1:9"),
    )
    source.client = Index(exporter("hostname"))  # type: ignore[assignment]
    source.discover(T0, T0 + 3600)
    assert source.warnings == []
    assert source.observed == {"dcgm_exporter": {"chat": "4.8.3+"}}


def test_the_run_and_the_telemetry_page_show_the_exporter_generation(
    prometheus_url: None, client: Client
) -> None:
    dep = deployment(dcgm_selector='hostname="node-1"')
    run = telemetry_run_create(deployments=["chat-v0"], start=at(T0), end=at(T0 + DAY))
    batches_write(
        batches=[Batch(records=[], observed={"dcgm_exporter": {"chat-v0": "4.8.3+"}})],
        source="prometheus",
        run=run,
    )
    run.refresh_from_db()
    assert run.params["observed"] == {"dcgm_exporter": {"chat-v0": "4.8.3+"}}
    EngineDiscovery.objects.create(
        deployment=dep,
        observed_at=at(T0),
        engine="vllm",
        label_sets={"DCGM_FI_DEV_FB_USED": exporter("hostname")},
    )
    client.force_login(user_in("lead", "tech lead"))
    page = client.get("/telemetry/chat-v0/").content.decode()
    assert 'DCGM exporter <span class="badge">4.8.3+</span>' in page
    assert "host label <code>hostname</code>" in page


@pytest.mark.integration
def test_a_backfill_through_a_selector_for_the_other_generation_names_the_label(
    settings: Any, prometheus: PromServer
) -> None:
    """The generated fleet carries Hostname (an exporter before 4.6.0-4.8.3);
    a fleet file written for the new one matches nothing and says why."""
    settings.PROMETHEUS_URL = prometheus.url
    settings.PROMETHEUS_MAX_SAMPLES = BUDGET
    settings.PROMETHEUS_TIMEOUT_S = 10.0
    deployment(dcgm_selector='hostname="node-a",GPU_I_ID="1"')
    run = telemetry_run_create(
        deployments=["chat-v0"],
        start=at(T0),
        end=at(T0 + 6 * 3600),
        options={"scrape_interval_s": 60},
    )
    run = run_execute(run)[0]
    warnings = " ".join(run.warnings)
    assert (
        "the exporter's series carry Hostname (not hostname): write "
        'Hostname="node-a",GPU_I_ID="1"'
    ) in warnings
    Deployment.objects.filter(name="chat-v0").update(dcgm_selector=MIG_1)
    fixed = run_execute(
        telemetry_run_create(
            deployments=["chat-v0"],
            start=at(T0),
            end=at(T0 + 6 * 3600),
            options={"scrape_interval_s": 60},
        )
    )[0]
    assert fixed.warnings == []
    assert fixed.params["observed"] == {"dcgm_exporter": {"chat-v0": "to 4.8.2"}}
