"""Telemetry that could not be measured says so, and every input is bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from costapp.ingest import ingest_run_create
from costapp.models import Deployment, DeploymentHour, DeviceHour, IngestRun
from costapp.sources.base import Window
from costapp.telemetry.services import (
    TelemetryInputError,
    telemetry_run_create,
    telemetry_run_execute,
)
from tests.support.services import free_port
from tests.telemetry.conftest import BUDGET, PromServer
from tests.telemetry.proxy import Proxy
from tests.telemetry.synth import T0

pytestmark = pytest.mark.django_db

DAY = 86400
HOUR = 3600
END = T0 + 3 * DAY


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def deployment(name: str = "chat-v1", **fields: Any) -> Deployment:
    values = {
        "engine": "vllm",
        "model_name": "m",
        "gpu_type": "H100-80GB",
        "prometheus_selector": 'namespace="chat"',
        **fields,
    }
    return Deployment.objects.create(name=name, **values)


def test_the_refresh_task_records_an_unreachable_prometheus_on_its_run_and_raises_nothing(
    settings: Any,
) -> None:
    """Why the task has no retry: the failure is the run's, and the next beat
    re-reads the same hours."""
    import time_machine

    from costapp.telemetry.tasks import telemetry_refresh_task

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings.PROMETHEUS_URL = url
    settings.PROMETHEUS_TIMEOUT_S = 2.0
    deployment()
    with time_machine.travel(at(END - 1800), tick=False):
        run_id = telemetry_refresh_task()
    run = IngestRun.objects.get(pk=run_id)
    assert run.status == IngestRun.FAILED
    assert f"cannot reach Prometheus at {url}" in run.error


# -- GPU-seconds that could not be measured are missing, not zero -------------

CHAT_V0_DCGM = 'Hostname="node-a",GPU_I_ID="1"'
MIG_3G = 3600 * 3 / 7  # MIG instance 1 (3g.40gb) up the whole hour


@pytest.fixture
def fleet(settings: Any, prometheus: PromServer) -> PromServer:
    settings.PROMETHEUS_URL = prometheus.url
    settings.PROMETHEUS_MAX_SAMPLES = BUDGET
    settings.PROMETHEUS_TIMEOUT_S = 10.0
    deployment()
    deployment(
        "chat-v0",
        gpu_type="A100-80GB",
        mig_profile="3g.40gb",
        prometheus_selector='namespace="batch"',
        dcgm_selector=CHAT_V0_DCGM,
    )
    return prometheus


def backfill(name: str, start: int, end: int, **selectors: str) -> IngestRun:
    run = telemetry_run_create(
        deployments=[name],
        start=at(start),
        end=at(end),
        dcgm_selectors={name: selectors["dcgm"]} if "dcgm" in selectors else None,
        options={"scrape_interval_s": 60},
    )
    return telemetry_run_execute(run=run)


def gpu_seconds(name: str) -> dict[int, float | None]:
    return {
        int(h.hour.timestamp()): h.gpu_seconds
        for h in DeploymentHour.objects.filter(deployment__name=name)
    }


@pytest.mark.integration
def test_a_dcgm_selector_matching_nothing_keeps_the_stored_gpu_hours_leaves_new_ones_empty_and_warns(
    fleet: PromServer, client: Client
) -> None:
    first = backfill("chat-v0", T0, T0 + 6 * HOUR)
    assert first.status == IngestRun.SUCCEEDED, first.error
    assert first.warnings == []
    measured = gpu_seconds("chat-v0")
    assert len(measured) == 6
    assert all(v == pytest.approx(MIG_3G) for v in measured.values())

    # A typo in the fleet file: the refresh task and backfills read through it.
    Deployment.objects.filter(name="chat-v0").update(
        dcgm_selector='Hostname="node-aa",GPU_I_ID="1"'
    )
    run = backfill("chat-v0", T0, T0 + 12 * HOUR)
    stored = gpu_seconds("chat-v0")
    assert len(stored) == 12
    # The six hours measured before keep their figure; the six new ones are
    # unknown (NULL), never 0 and never replicas x GPUs guessed.
    assert {h: stored[h] for h in measured} == measured
    assert [stored[h] for h in sorted(set(stored) - set(measured))] == [None] * 6
    warnings = " ".join(run.warnings)
    assert 'DCGM selector {Hostname="node-aa",GPU_I_ID="1"} matched no DCGM series' in (
        warnings
    )
    assert (
        "GPU-hours unknown for 12 hours from 2024-03-04 00:00 to 2024-03-04 11:00"
        in (warnings)
    )
    assert "a figure stored by an earlier read is kept" in warnings
    # Requests were still read and stored.
    assert (
        DeploymentHour.objects.filter(
            deployment__name="chat-v0", requests_stop__gt=0
        ).count()
        == 12
    )

    client.force_login(User.objects.create_user("lead"))
    page = client.get(
        f"/telemetry/chat-v0/?start={at(T0).date()}&end={at(T0 + DAY).date()}"
    ).content.decode()
    assert "GPU-hours unknown for 6 of 12 hours" in page
    assert "matched no DCGM series" in page  # the discovery's message
    index = client.get("/telemetry/").content.decode()
    assert "GPU-hours unknown for 12 hours" in index


@pytest.mark.integration
def test_a_dcgm_selector_prometheus_refuses_gives_a_partial_run_that_keeps_the_stored_gpu_hours(
    fleet: PromServer,
) -> None:
    backfill("chat-v0", T0, T0 + 6 * HOUR)
    measured = gpu_seconds("chat-v0")
    # Well-formed, but RE2 has no lookahead: Prometheus refuses it.
    run = backfill("chat-v0", T0, T0 + 6 * HOUR, dcgm='Hostname=~"(?=node-a)"')
    assert run.status == IngestRun.PARTIAL
    assert 'DCGM selector {Hostname=~"(?=node-a)"} was refused by Prometheus' in (
        run.error
    )
    assert "GPU-hours unknown" in run.error
    assert gpu_seconds("chat-v0") == measured
    assert not DeviceHour.objects.filter(hostname="node-aa").exists()


@pytest.mark.integration
def test_an_hour_without_dcgm_series_and_without_a_replica_count_has_no_gpu_hours(
    fleet: PromServer,
) -> None:
    # An engine whose scrape lacks vllm:num_requests_running, and no DCGM
    # selector: nothing says how many replicas (hence GPUs) were up.
    Deployment.objects.filter(name="chat-v1").update(
        prometheus_selector='namespace="chat",__name__!="vllm:num_requests_running"'
    )
    run = backfill("chat-v1", T0, T0 + 3 * HOUR)
    assert run.status == IngestRun.SUCCEEDED, run.error
    stored = gpu_seconds("chat-v1")
    assert list(stored.values()) == [None, None, None]
    assert (
        DeploymentHour.objects.filter(
            deployment__name="chat-v1", requests_stop__gt=0
        ).count()
        == 3
    )
    assert run.warnings == [
        "chat-v1: GPU-hours unknown for 3 hours from 2024-03-04 00:00 to "
        "2024-03-04 02:00 UTC (no DCGM selector and no vllm:num_requests_running "
        "samples (replicas unknown)); a figure stored by an earlier read is kept"
    ]


@pytest.mark.integration
def test_a_re_read_that_finds_dcgm_series_replaces_the_stored_figure_even_when_smaller(
    fleet: PromServer,
) -> None:
    backfill("chat-v0", T0, T0 + 3 * HOUR)
    DeploymentHour.objects.filter(deployment__name="chat-v0").update(
        gpu_seconds=99_999.0
    )
    run = backfill("chat-v0", T0, T0 + 3 * HOUR)
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert all(v == pytest.approx(MIG_3G) for v in gpu_seconds("chat-v0").values())


# -- selectors and stored runs ----------------------------------------------

INJECTION = 'Hostname="x"} or {__name__=~".+"'


@pytest.mark.integration
def test_a_stored_run_naming_its_own_prometheus_url_fails_and_the_token_goes_nowhere(
    fleet: PromServer, settings: Any
) -> None:
    settings.PROMETHEUS_BEARER_TOKEN = "s3cret"
    with Proxy(fleet.url) as elsewhere:
        run = ingest_run_create(
            source="prometheus",
            window=Window(at(T0), at(T0 + HOUR)),
            target="chat-v1",
            params={"deployments": ["chat-v1"], "config": {"url": elsewhere.url}},
        )
        run = telemetry_run_execute(run=run)
        assert elsewhere.count == 0
    assert run.status == IngestRun.FAILED
    assert run.error.startswith("config={'url': 'http://127.0.0.1:")
    assert "a run may not carry Prometheus settings of its own" in run.error
    assert not DeploymentHour.objects.exists()


@pytest.mark.integration
def test_a_stored_run_with_an_injected_dcgm_selector_is_refused_before_prometheus(
    fleet: PromServer,
) -> None:
    """A run stored before the check existed (or written around the service)."""
    with Proxy(fleet.url) as proxy:
        with override_settings(PROMETHEUS_URL=proxy.url):
            run = ingest_run_create(
                source="prometheus",
                window=Window(at(T0), at(T0 + HOUR)),
                target="chat-v0",
                params={
                    "deployments": ["chat-v0"],
                    "dcgm_selectors": {"chat-v0": INJECTION},
                },
            )
            run = telemetry_run_execute(run=run)
        queries = proxy.paths
    assert run.status == IngestRun.PARTIAL  # chat-v0's own series still read
    assert (
        "chat-v0: dcgm_selector='Hostname=\"x\"} or {__name__=~\".+\"': expected ','"
        in (run.error)
    )
    assert not any("or {" in q for q in queries)
    assert set(gpu_seconds("chat-v0").values()) == {None}


def test_the_service_refuses_an_injected_dcgm_selector_with_field_and_value(
    settings: Any,
) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # never contacted
    deployment()
    with pytest.raises(TelemetryInputError) as refused:
        telemetry_run_create(
            deployments=["chat-v1"],
            start=at(T0),
            end=at(T0 + DAY),
            dcgm_selectors={"chat-v1": INJECTION},
        )
    assert refused.value.field == "dcgm_selector"
    assert str(refused.value).startswith(f"dcgm_selector={INJECTION!r}: expected ','")
    assert not IngestRun.objects.exists()


def test_the_backfill_command_refuses_an_injected_dcgm_selector(settings: Any) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    deployment()
    with pytest.raises(CommandError, match=r"dcgm_selector='Hostname=\"x\"\} or"):
        call_command(
            "telemetry_backfill",
            "--deployment=chat-v1",
            f"--start={at(T0).isoformat()}",
            f"--end={at(T0 + DAY).isoformat()}",
            f"--dcgm-selector={INJECTION}",
        )
    assert not IngestRun.objects.exists()
