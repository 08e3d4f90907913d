"""Telemetry that could not be measured says so, and every input is bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import time_machine
import yaml
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.utils.html import escape

from analytics.errors import InvalidInput
from costapp.fleet.fleetfile import fleet_load
from costapp.fleet.forms import DeploymentForm
from costapp.ingest import ingest_run_create
from costapp.models import Deployment, DeploymentHour, DeviceHour, IngestRun
from costapp.pipeline.runs import run_execute
from costapp.sources.base import Window
from costapp.telemetry.services import telemetry_run_create
from costapp.telemetry.tasks import telemetry_refresh_task
from costapp.yamlfile import FileProblems
from tests.support.services import free_port
from tests.support.users import user_in
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
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings.PROMETHEUS_URL = url
    settings.PROMETHEUS_TIMEOUT_S = 2.0
    deployment()
    with time_machine.travel(at(END - 1800), tick=False):
        (run_id,) = telemetry_refresh_task()
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
    return run_execute(run)[0]


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

    client.force_login(user_in("lead", "admin"))
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


@pytest.mark.integration
def test_hours_without_any_sample_write_no_row_keep_what_was_stored_and_warn(
    fleet: PromServer,
) -> None:
    # chat-v0's scrape gap runs from day 1 20:17 to day 2 01:17.
    earlier = at(T0 + DAY + 22 * HOUR)
    dep = Deployment.objects.get(name="chat-v0")
    DeploymentHour.objects.create(
        deployment=dep, hour=earlier, requests_stop=7.0, gpu_seconds=1234.0
    )
    run = backfill("chat-v0", T0 + DAY + 12 * HOUR, T0 + 2 * DAY)
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert run.warnings == [
        "chat-v0: no samples for 3 hours from 2024-03-05 21:00 to 2024-03-05 23:00 "
        "UTC: no row written for them (missing, not zero); rows stored by an "
        "earlier read are kept"
    ]
    kept = DeploymentHour.objects.get(deployment=dep, hour=earlier)
    assert (kept.requests_stop, kept.gpu_seconds) == (7.0, 1234.0)
    assert not DeploymentHour.objects.filter(
        deployment=dep, hour__in=[at(T0 + DAY + 21 * HOUR), at(T0 + DAY + 23 * HOUR)]
    ).exists()


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
        run, _ = run_execute(run)
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
            run, _ = run_execute(run)
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
    with pytest.raises(InvalidInput) as refused:
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


# -- the backfill form and the deployment page: bounded, and saying why -------


@pytest.fixture
def lead(client: Client) -> Client:
    client.force_login(user_in("lead", "admin"))
    return client


def post_backfill(client: Client, **fields: str) -> str:
    data = {"deployments": ["chat-v1"], "start": "2024-03-04", "end": "2024-03-05"}
    response = client.post("/telemetry/", {**data, **fields})
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_without_a_prometheus_url_the_backfill_form_says_so_and_stores_nothing(
    settings: Any, lead: Client
) -> None:
    settings.PROMETHEUS_URL = ""
    deployment()
    assert "PROMETHEUS_URL is not set" in lead.get("/telemetry/").content.decode()
    page = post_backfill(lead)
    assert '<ul class="errorlist nonfield"><li>PROMETHEUS_URL is not set' in page
    assert not IngestRun.objects.exists()


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("start", "0001-01-01", "outside 2015-01-01 .. "),
        ("end", "9999-12-31", "outside 2015-01-01 .. "),
        ("start", "2026-13-45", "is not a date (YYYY-MM-DD)"),
        ("start", "2024\x00", "is not a date (YYYY-MM-DD)"),
        ("dcgm_selector", INJECTION, "expected &#x27;,&#x27; at position 12"),
        ("dcgm_selector", 'Hostname="a\x00"', "contains a NUL byte"),
    ],
)
def test_the_backfill_form_refuses_a_bad_value_naming_the_field_and_the_value(
    settings: Any, lead: Client, field: str, value: str, why: str
) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # never contacted
    deployment()
    page = post_backfill(lead, **{field: value})
    assert escape(f"{field}={value!r}") in page
    assert why in page
    assert not IngestRun.objects.exists()


def test_a_backfill_over_the_step_budget_is_refused_until_confirmed(
    settings: Any, lead: Client, django_capture_on_commit_callbacks: Any
) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # the run is never executed
    deployment()
    # 2015-01-01 .. 2024-03-05 is 3,351 one-day slices of one deployment.
    page = post_backfill(lead, start="2015-01-01", end="2024-03-05")
    assert (
        "end=&#x27;2024-03-05T00:00:00+00:00&#x27;: this backfill takes 3,352 steps"
        in (page)
    )
    assert "over the budget of 2,000: confirm it" in page
    assert not IngestRun.objects.exists()
    with django_capture_on_commit_callbacks() as queued:
        response = lead.post(
            "/telemetry/",
            {
                "deployments": ["chat-v1"],
                "start": "2015-01-01",
                "end": "2024-03-05",
                "confirm": "on",
            },
        )
    assert response.status_code == 302
    run = IngestRun.objects.get()
    assert (run.window_start, run.window_end) == (
        datetime(2015, 1, 1, tzinfo=UTC),
        datetime(2024, 3, 5, tzinfo=UTC),
    )
    assert len(queued) == 1  # queued once the row commits


@pytest.mark.parametrize(
    "query, message",
    [
        ("start=0001-01-01", "start=&#x27;0001-01-01&#x27;: outside 2015-01-01 .. "),
        ("end=9999-12-31", "end=&#x27;9999-12-31&#x27;: outside 2015-01-01 .. "),
        ("start=junk", "start=&#x27;junk&#x27;: is not a date (YYYY-MM-DD)"),
        ("start=2024%00", "start=&#x27;2024\\x00&#x27;: is not a date (YYYY-MM-DD)"),
        (
            "start=2024-03-05&end=2024-03-04",
            "end=&#x27;2024-03-04&#x27;: not after start 2024-03-05",
        ),
        (
            "start=2015-01-01&end=2024-03-07",
            "A window is at most 1098 days: showing 2021-03-05 .. "
            "2024-03-07 of 2015-01-01 .. 2024-03-07.",
        ),
    ],
)
def test_the_deployment_page_names_a_refused_or_bounded_window(
    lead: Client, query: str, message: str
) -> None:
    dep = deployment()
    DeploymentHour.objects.create(deployment=dep, hour=at(T0), gpu_seconds=3600.0)
    response = lead.get(f"/telemetry/chat-v1/?{query}")
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page
    assert "long windows are aggregated, not cut" in page


def test_a_window_longer_than_31_days_is_shown_whole_not_capped(
    lead: Client,
) -> None:
    dep = deployment()
    DeploymentHour.objects.create(deployment=dep, hour=at(T0), gpu_seconds=3600.0)
    page = lead.get(
        f"/telemetry/chat-v1/?start={at(T0 - 60 * DAY).date()}&end={at(T0 + DAY).date()}"
    ).content.decode()
    assert f"Showing UTC days <strong>{at(T0 - 60 * DAY).date()}</strong>" in page
    assert "at most 31 days" not in page


def test_a_40_day_window_tabulates_days_not_hours_and_a_row_per_gpu(
    lead: Client,
) -> None:
    dep = deployment()
    DeploymentHour.objects.bulk_create(
        DeploymentHour(deployment=dep, hour=at(T0 + h * HOUR), gpu_seconds=3600.0)
        for h in range(40 * 24)
        if h != 5  # one hour without a row: its day has 23 hours, not a 0
    )
    DeviceHour.objects.bulk_create(
        DeviceHour(
            deployment=dep,
            hostname="node-b",
            gpu_uuid=f"GPU-{g}",
            gpu_index=g,
            hour=at(T0 + h * HOUR),
            power_w_mean=100.0 + g,
            energy_j=360_000.0,
        )
        for h in range(40 * 24)
        for g in range(2)
    )
    page = lead.get(
        f"/telemetry/chat-v1/?start={at(T0).date()}&end={at(T0 + 40 * DAY).date()}"
    ).content.decode()
    hours = page[page.index('id="hours"') : page.index('id="devices"')]
    # A row per UTC day, its GPU-seconds summed: 39 x 86,400 and one of 23 h.
    assert hours.count("<tr>") == 1 + 40
    assert hours.count('<td class="num">86,400</td>') == 39
    assert '<td class="num">82,800</td>' in hours
    assert '<td class="num">23</td>' in hours
    # GPUs: one row each over the window (not one per GPU and hour).
    devices = page[page.index('id="devices"') :]
    assert devices.count("<td>node-b</td>") == 2
    assert devices.count('<td class="num">960</td>') == 2  # hours seen
    assert '<td class="num">101.0</td>' in devices  # GPU 1's mean power
    assert '<td class="num">345,600,000</td>' in devices  # 960 h x 360 kJ


def test_the_fleet_file_and_the_admin_refuse_the_injected_selector_with_field_and_value(
    tmp_path: Path,
) -> None:
    """The same check as the form, the command and the adapter (promql.py)."""
    example = Path(__file__).resolve().parents[2] / "docs" / "fleet.example.yaml"
    data = yaml.safe_load(example.read_text())
    data["deployments"][0]["dcgm_selector"] = INJECTION
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(FileProblems) as refused:
        fleet_load(path=path)
    assert f"(chat): dcgm_selector {INJECTION!r}: expected ','" in str(refused.value)
    assert not Deployment.objects.exists()

    fleet_load(path=example)
    chat = Deployment.objects.get(name="chat")
    values = {
        f: getattr(chat, f)
        for f in DeploymentForm.Meta.fields
        if f not in {"pool", "cost_rules"}
    }
    form = DeploymentForm(
        data={
            **values,
            "cost_rules": "[]",
            "pool": chat.pool_id,
            "dcgm_selector": INJECTION,
        },
        instance=chat,
    )
    assert not form.is_valid()
    assert form.errors["dcgm_selector"] == [
        f"dcgm_selector {INJECTION!r}: expected ',' at position 12: "
        "'} or {__name__=~\".+\"'"
    ]
