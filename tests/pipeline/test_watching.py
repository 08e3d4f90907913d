"""The pipeline is watched: the reaper sends again what nobody holds, the
pages say when figures rest on older data than is stored, /pipeline/ shows
each step, /metrics exports them, and a killed run's data still follows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from costapp.models import (
    AlertRule,
    AlertRuleEvaluated,
    IngestRun,
    PipelineStep,
)
from costapp.pipeline.change import Change
from costapp.pipeline.selectors import figures_behind
from costapp.pipeline.services import (
    pipeline_request,
    step_claim,
    steps_queued,
    steps_to_requeue,
)
from costapp.roles import FINANCE, TECH_LEAD
from costapp.tasks import runs_reap_task
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

NOW = datetime(2026, 12, 1, 11, 20, tzinfo=UTC)


def test_the_reaper_sends_again_what_no_lease_holds_and_no_task_was_sent_for(
    settings: Any,
) -> None:
    settings.COSTAPP_PIPELINE_REQUEUE_S = 120
    pipeline_request(steps=["unit_costs", "idle"], change=Change(), now=NOW)
    steps_queued(["unit_costs", "idle"], now=NOW)
    # Just sent: a worker may simply not have got to them yet.
    assert steps_to_requeue(now=NOW + timedelta(seconds=60)) == []
    # Nobody claimed them in two minutes (a broker restarted empty).
    assert steps_to_requeue(now=NOW + timedelta(minutes=3)) == ["idle", "unit_costs"]
    # A live lease holds one: only the other is sent again.
    claim = step_claim("unit_costs", now=NOW + timedelta(minutes=3))
    assert claim is not None
    later = NOW + timedelta(minutes=3, seconds=10)
    assert steps_to_requeue(now=later) == ["idle"]
    # The holder died: once its lease runs out, its work is sent again at once.
    row = PipelineStep.objects.get(name="unit_costs")
    assert row.lease_until is not None
    assert "unit_costs" in steps_to_requeue(now=row.lease_until + timedelta(seconds=1))


def test_a_run_whose_worker_died_after_storing_data_still_gets_its_figures(
    settings: Any,
) -> None:
    started = NOW - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 120)
    run = IngestRun.objects.create(
        source="cost_explorer",
        target="123456789012",
        window_start=NOW - timedelta(days=3),
        window_end=NOW,
        status=IngestRun.RUNNING,
        started_at=started,
        rows_written=40,
    )
    with time_machine.travel(NOW, tick=False):
        assert runs_reap_task() == 1
    run.refresh_from_db()
    assert run.status == IngestRun.PARTIAL and "worker stopped" in run.error
    pending = Change.from_json(PipelineStep.objects.get(name="cost_shares").pending)
    assert pending == Change.of(since=run.window_start, until=run.window_end)


def test_the_pages_say_when_the_figures_are_older_than_the_data(
    client: Client,
) -> None:
    client.force_login(user_in("money", FINANCE))
    with time_machine.travel(NOW, tick=False):
        pipeline_request(steps=["cost_shares"], change=Change(), now=NOW)
        # A recompute takes seconds after each refresh: not worth a note.
        assert figures_behind(now=NOW + timedelta(seconds=30)) is None
    with time_machine.travel(NOW + timedelta(minutes=7), tick=False):
        page = client.get("/").content.decode()
    assert 'id="figures-behind"' in page
    assert "data stored since 2026-12-01 11:20" in page
    # Finance may not open the pipeline page: no link to it.
    assert "/pipeline/" not in page


def test_the_pipeline_page_shows_each_step_and_evaluate_now_evaluates(
    client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    AlertRule.objects.create(
        name="r", metric="cost_per_1k_requests", grain="hour", ratio=1.2
    )
    client.force_login(user_in("money", FINANCE))
    assert client.get("/pipeline/").status_code == 403
    client.force_login(user_in("lead", TECH_LEAD))
    page = client.get("/pipeline/").content.decode()
    for title in ("telemetry rollups", "unit costs and baselines", "alert evaluation"):
        assert title in page
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post("/pipeline/", {"back": "alerts"})
    assert done.status_code == 302 and done["Location"] == "/alerts/"
    # No broker in the tests: it ran in the request.
    assert AlertRuleEvaluated.objects.filter(rule__name="r").exists()
    # Only the fixed pages are a way back, never a URL from the form.
    done = client.post("/pipeline/", {"back": "https://elsewhere.example/"})
    assert done["Location"] == "/pipeline/"


def test_metrics_export_each_step_and_the_last_data_of_each_source(
    client: Client, settings: Any
) -> None:
    settings.COSTAPP_METRICS_TOKEN = "a-token"
    with time_machine.travel(NOW, tick=False):
        pipeline_request(steps=["unit_costs"], change=Change(), now=NOW)
    IngestRun.objects.create(
        source="prometheus",
        window_start=NOW - timedelta(hours=3),
        window_end=NOW,
        status=IngestRun.SUCCEEDED,
        finished_at=NOW,
    )
    with time_machine.travel(NOW + timedelta(minutes=5), tick=False):
        text = client.get(
            "/metrics", HTTP_AUTHORIZATION="Bearer a-token"
        ).content.decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert (
        got[("costapp_pipeline_step_waiting_seconds", (("step", "unit_costs"),))] == 300
    )
    assert got[("costapp_pipeline_step_waiting_seconds", (("step", "alerts"),))] == 0
    assert got[("costapp_pipeline_step_failures_total", (("step", "unit_costs"),))] == 0
    assert (
        got[("costapp_source_last_data_timestamp_seconds", (("source", "prometheus"),))]
        == NOW.timestamp()
    )
