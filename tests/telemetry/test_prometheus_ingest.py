"""Ingest from a real Prometheus filled with a generated fleet; compare with truth."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import requests
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client

from analytics.errors import InvalidInput
from costapp.ingest import ingest_run_execute
from costapp.models import (
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    IngestRun,
)
from costapp.sources.base import DeploymentHourRecord, HistogramRecord, Window
from costapp.sources.prometheus import (
    Options,
    PrometheusConfig,
    PrometheusSource,
    Target,
)
from costapp.sources.registry import source_for_run
from costapp.telemetry.services import telemetry_run_create
from costapp.telemetry.tasks import telemetry_refresh_task
from tests.support.services import free_port
from tests.support.users import user_in
from tests.telemetry.conftest import BUDGET, PromServer
from tests.telemetry.proxy import Proxy
from tests.telemetry.synth import GAP, T0, hour_of
from tests.telemetry.truth import (
    check_deployment_hours,
    check_devices,
    check_histograms,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

DAY = 86400
END = T0 + 3 * DAY
DCGM = {"chat-v0": 'Hostname="node-a",GPU_I_ID="1"'}
PARAMS = {"scrape_interval_s": 60, "fleet_dcgm_selector": 'Hostname="node-b"'}


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@pytest.fixture
def fleet(settings: Any, prometheus: PromServer) -> PromServer:
    settings.PROMETHEUS_URL = prometheus.url
    settings.PROMETHEUS_MAX_SAMPLES = BUDGET
    settings.PROMETHEUS_TIMEOUT_S = 10.0
    settings.PROMETHEUS_CONCURRENCY = 4
    Deployment.objects.create(
        name="chat-v1",
        engine="vllm",
        model_name="m",
        gpu_type="H100-80GB",
        prometheus_selector='namespace="chat"',
    )
    Deployment.objects.create(
        name="chat-v0",
        engine="vllm",
        model_name="m",
        gpu_type="A100-80GB",
        mig_profile="3g.40gb",
        prometheus_selector='namespace="batch"',
    )
    return prometheus


Log = list[tuple[str, dict[str, list[str]], int, int]]


def run_backfill(
    start: int,
    end: int,
    *,
    deployments: tuple[str, ...] = ("chat-v1", "chat-v0"),
    log: Log | None = None,
    **params: Any,
) -> IngestRun:
    run = telemetry_run_create(
        deployments=list(deployments),
        start=at(start),
        end=at(end),
        dcgm_selectors={k: v for k, v in DCGM.items() if k in deployments},
        options={**PARAMS, **params},
    )
    source = source_for_run(run)
    if log is not None:
        source.client.session.hooks["response"].append(_recorder(log))
    return ingest_run_execute(run=run, source=source)


def _recorder(log: Log) -> Callable[..., None]:
    def record(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        url = urlparse(response.request.url or "")
        series = points = 0
        if url.path.endswith("/api/v1/query") and response.status_code == 200:
            result = response.json()["data"]["result"]
            series = len(result)
            points = max((len(r.get("values", [])) for r in result), default=0)
            total = sum(len(r.get("values", [])) for r in result)
            log.append((url.path, parse_qs(url.query), points, total))
        else:
            log.append((url.path, parse_qs(url.query), points, series))

    return record


def check_everything(truth: Any, start: int, end: int) -> None:
    for name in ("chat-v1", "chat-v0"):
        d = Deployment.objects.get(name=name)
        assert check_deployment_hours(
            truth, name, DeploymentHour.objects.filter(deployment=d), start, end
        )
        assert check_histograms(
            truth, name, HistogramHour.objects.filter(deployment=d), start, end
        )
    devices = DeviceHour.objects.all()
    assert check_devices(truth, devices, start, end) == devices.count()


def test_a_three_day_backfill_matches_every_generated_hourly_figure(
    fleet: PromServer,
) -> None:
    run = run_backfill(T0, END)
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert run.steps_done == run.steps_total
    check_everything(fleet.truth, T0, END)
    v0 = Deployment.objects.get(name="chat-v0")
    gap_hours = {hour_of(t) for t in range(GAP[0] + 3600, GAP[1] - 3600, 3600)}
    assert (
        gap_hours
        and not DeploymentHour.objects.filter(
            deployment=v0, hour__in=[at(h) for h in gap_hours]
        ).exists()
    ), "hours inside the scrape gap must stay missing"
    # MIG instance rows carry no GPU_UTIL; the whole GPU does.
    assert not DeviceHour.objects.filter(
        gpu_instance_id="1", gpu_util_mean__isnull=False
    ).exists()
    assert DeviceHour.objects.filter(hostname="node-b", gpu_util_mean__isnull=False)
    found = EngineDiscovery.objects.get(deployment__name="chat-v1")
    assert found.engine_generation == "v1+v0"  # 0.10 still exported V0 names
    assert found.cache_config["num_gpu_blocks"] == "11560"
    assert "vllm:prefix_cache_hits_total" in found.series_found
    old = EngineDiscovery.objects.get(deployment__name="chat-v0")
    assert old.engine_generation == "v0"
    assert "vllm:request_prefill_time_seconds_bucket" in old.series_missing


def test_no_request_asks_for_more_than_11000_points_per_series_or_the_budget(
    fleet: PromServer,
) -> None:
    log: Log = []
    run = run_backfill(T0, END, log=log)
    assert run.status == IngestRun.SUCCEEDED, run.error
    queries = [entry for entry in log if entry[0].endswith("/api/v1/query")]
    assert len(queries) > 10
    for _, query, points, total in queries:
        m = re.search(r"\[(\d+)ms\]", query["query"][0])
        assert m, query
        assert int(m.group(1)) / 60_000 <= 11_000
        assert points <= 11_000
        assert total <= BUDGET, (query, total)
    assert run.api_requests == len(log)
    # Without chunking, one day of one deployment is over Prometheus's limit.
    day = requests.get(
        f"{fleet.url}/api/v1/query",
        params={"query": '{namespace="chat"}[1d]', "time": str(T0 + DAY)},
        timeout=10,
    )
    assert day.status_code == 422
    assert "too many samples" in day.json()["error"]


def test_chunked_and_unchunked_reads_of_a_short_window_give_identical_records(
    prometheus: PromServer,
) -> None:
    targets = [
        Target("chat-v1", "vllm", 'namespace="chat"'),
        Target("chat-v0", "vllm", 'namespace="batch"', 3 / 7, DCGM["chat-v0"]),
    ]
    window = Window(at(T0 + DAY + 11 * 3600), at(T0 + DAY + 13 * 3600))

    def records(chunk_s: float | None, budget: int) -> list[Any]:
        source = PrometheusSource(
            targets=targets,
            config=PrometheusConfig(url=prometheus.url, max_samples=budget),
            options=Options(scrape_interval_s=60, chunk_s=chunk_s),
            now=lambda: at(END),
        )
        out = [r for batch in source.fetch(window) for r in batch.records]
        return out, source.client.requests

    chunked, n_chunked = records(300, BUDGET)
    whole, n_whole = records(None, 19_000)
    assert n_chunked > n_whole
    assert chunked == whole
    assert any(isinstance(r, HistogramRecord) for r in whole)
    # The window holds p1's restart (counter reset) at 12:00:30.
    hours = [r for r in whole if isinstance(r, DeploymentHourRecord)]
    assert len(hours) == 4


def test_a_window_opening_inside_a_gap_gives_the_jump_to_the_first_hour_with_samples(
    fleet: PromServer,
) -> None:
    start = hour_of(GAP[0]) + 2 * 3600  # inside the gap
    end = start + 6 * 3600
    run = run_backfill(start, end)
    assert run.status == IngestRun.SUCCEEDED, run.error
    v0 = Deployment.objects.get(name="chat-v0")
    rows = DeploymentHour.objects.filter(deployment=v0)
    assert check_deployment_hours(fleet.truth, "chat-v0", rows, start, end)
    first = rows.order_by("hour").first()
    assert first is not None and first.hour == at(hour_of(GAP[1]))
    normal = fleet.truth.counters[("chat-v0", "requests_stop")][hour_of(GAP[1]) + 3600]
    assert first.requests_stop > 2 * normal, "the gap's traffic shows in its first hour"


def test_a_backfill_against_a_prometheus_that_is_down_fails_with_the_reason(
    fleet: PromServer, settings: Any
) -> None:
    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    run = run_backfill(T0, T0 + DAY)
    assert run.status == IngestRun.FAILED
    assert "cannot reach Prometheus" in run.error
    assert not DeploymentHour.objects.exists()


def test_a_prometheus_slower_than_the_timeout_fails_the_run_with_the_reason(
    fleet: PromServer, settings: Any
) -> None:
    with Proxy(fleet.url, delay_s=1.5) as proxy:
        settings.PROMETHEUS_URL = proxy.url
        settings.PROMETHEUS_TIMEOUT_S = 0.3
        run = run_backfill(T0, T0 + DAY)
    assert run.status == IngestRun.FAILED
    assert "did not answer within 0.3 s" in run.error


@pytest.mark.parametrize("failure", ["503", "killed"])
def test_a_failure_mid_backfill_leaves_correct_rows_and_a_rerun_completes(
    fleet: PromServer, settings: Any, failure: str
) -> None:
    after = 45  # discovery and the first day's slice take fewer requests
    kwargs = {"fail_after": after} if failure == "503" else {"die_after": after}
    with Proxy(fleet.url, **kwargs) as proxy:
        settings.PROMETHEUS_URL = proxy.url
        run = run_backfill(T0, END)
    assert run.status == IngestRun.PARTIAL, (run.status, run.error)
    reason = "kept answering 5xx" if failure == "503" else "cannot reach Prometheus"
    assert reason in run.error
    stored = DeploymentHour.objects.order_by("-hour").first()
    assert stored is not None
    done_until = int(stored.hour.timestamp()) + 3600
    assert done_until > T0 and (done_until - T0) % DAY == 0
    # Every stored hour is right, and only whole slices were stored.
    check_everything(fleet.truth, T0, done_until)

    settings.PROMETHEUS_URL = fleet.url
    rerun = run_backfill(T0, END)
    assert rerun.status == IngestRun.SUCCEEDED, rerun.error
    check_everything(fleet.truth, T0, END)


def test_a_selector_prometheus_refuses_is_reported_with_prometheus_own_error_text(
    fleet: PromServer, client: Client
) -> None:
    # Well-formed PromQL, but RE2 has no lookahead: only Prometheus can say so.
    Deployment.objects.filter(name="chat-v1").update(
        prometheus_selector='namespace=~"(?=chat)"'
    )
    run = run_backfill(T0, T0 + DAY)
    assert run.status == IngestRun.PARTIAL  # chat-v0 was still ingested
    assert 'namespace=~"(?=chat)"' in run.error
    assert "invalid or unsupported Perl syntax" in run.error  # Prometheus's text
    assert DeploymentHour.objects.filter(deployment__name="chat-v0").exists()
    discovery = EngineDiscovery.objects.get(deployment__name="chat-v1")
    assert "Perl syntax" in discovery.error

    client.force_login(user_in("lead", "admin"))
    page = client.get("/telemetry/chat-v1/").content.decode()
    assert "Perl syntax" in page
    assert "Perl syntax" in client.get("/telemetry/").content.decode()

    with pytest.raises(CommandError, match="Perl syntax"):
        call_command(
            "telemetry_backfill",
            "--deployment=chat-v1",
            f"--start={at(T0).isoformat()}",
            f"--end={at(T0 + 3600).isoformat()}",
        )


def test_a_malformed_stored_selector_is_refused_before_prometheus_with_field_and_value(
    fleet: PromServer,
) -> None:
    Deployment.objects.filter(name="chat-v1").update(
        prometheus_selector='namespace="chat'
    )
    log: Log = []
    run = run_backfill(T0, T0 + DAY, log=log)
    assert run.status == IngestRun.PARTIAL  # chat-v0 was still ingested
    assert (
        "chat-v1: prometheus_selector='namespace=\"chat': unterminated string"
        in run.error
    )
    assert not any('namespace="chat' in str(query) for _, query, _, _ in log)
    discovery = EngineDiscovery.objects.get(deployment__name="chat-v1")
    assert "unterminated string" in discovery.error


def test_a_selector_matching_nothing_is_reported_with_the_selector(
    fleet: PromServer,
) -> None:
    Deployment.objects.filter(name="chat-v1").update(
        prometheus_selector='namespace="nope"'
    )
    run = run_backfill(T0, T0 + DAY, deployments=("chat-v1",))
    # Only the discovery (with its error, for the page) was stored.
    assert run.status in {IngestRun.FAILED, IngestRun.PARTIAL}
    assert not DeploymentHour.objects.exists()
    assert 'namespace="nope"' in run.error and "matched no vllm series" in run.error


def test_the_backfill_form_queues_a_run_that_fills_the_deployment_page(
    fleet: PromServer,
    client: Client,
    django_capture_on_commit_callbacks: Any,
) -> None:
    client.force_login(user_in("lead", "admin"))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/telemetry/",
            {
                "deployments": ["chat-v0"],
                "start": at(T0).date().isoformat(),
                "end": at(T0 + DAY).date().isoformat(),
                "dcgm_selector": DCGM["chat-v0"],
                "scrape_interval_s": "60",
            },
        )
    assert response.status_code == 302, response.content
    run = IngestRun.objects.get(source="prometheus")
    assert run.status == IngestRun.SUCCEEDED, run.error
    index = client.get("/telemetry/").content.decode()
    assert "succeeded" in index
    page = client.get(
        f"/telemetry/chat-v0/?start={at(T0).date()}&end={at(T0 + DAY).date()}"
    ).content.decode()
    assert "3g.40gb #1" in page  # the MIG instance row
    assert page.count("<tr>") > 48
    assert (
        client.get("/telemetry/chat-v0/?start=junk&end=2020-01-01").status_code == 200
    )


def test_the_command_backfills_and_prints_the_outcome(
    fleet: PromServer, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command(
        "telemetry_backfill",
        "--deployment=chat-v1",
        f"--start={at(T0).isoformat()}",
        f"--end={at(T0 + 6 * 3600).isoformat()}",
        "--scrape-interval=60",
    )
    out = capsys.readouterr().out
    assert "succeeded" in out
    assert DeploymentHour.objects.filter(deployment__name="chat-v1").count() == 6
    with pytest.raises(CommandError, match="--start"):
        call_command(
            "telemetry_backfill", "--deployment=chat-v1", "--start=soon", "--end=x"
        )


def test_the_refresh_task_re_pulls_the_last_hours(
    fleet: PromServer,
) -> None:
    with time_machine.travel(at(END - 1800), tick=False):
        (run_id,) = telemetry_refresh_task()
    run = IngestRun.objects.get(pk=run_id)
    assert run.status == IngestRun.SUCCEEDED, run.error
    hours = DeploymentHour.objects.filter(deployment__name="chat-v1")
    assert hours.count() == 3
    check = [h.hour for h in hours.order_by("hour")]
    assert check[-1] == at(END - 3600)


def test_backfill_start_refuses_a_deployment_without_selector(
    fleet: PromServer,
) -> None:
    Deployment.objects.create(name="bare", model_name="m", gpu_type="L4")
    with pytest.raises(InvalidInput, match="bare"):
        telemetry_run_create(deployments=["bare"], start=at(T0), end=at(END))
