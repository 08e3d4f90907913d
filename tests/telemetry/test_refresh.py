"""The beat's refresh of a large fleet: one run reads every deployment with a
selector over the last hours, whatever their number."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costapp.models import Deployment
from costapp.telemetry.services import TARGET_LENGTH, telemetry_refresh_create

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

NOW = datetime(2026, 12, 6, 10, 20, tzinfo=UTC)


def test_a_refresh_of_a_thousand_deployments_reads_them_all_in_parts(
    settings: Any,
) -> None:
    settings.PROMETHEUS_URL = "http://prometheus.invalid:9090"
    settings.TELEMETRY_REFRESH_HOURS = 3
    settings.TELEMETRY_REFRESH_SPLIT = 400
    names = [f"deployment-{i:04d}" for i in range(1000)]
    Deployment.objects.bulk_create(
        Deployment(
            name=n, model_name="m", gpu_type="L4", prometheus_selector=f'app="{n}"'
        )
        for n in names
    )
    Deployment.objects.create(name="no-selector", model_name="m", gpu_type="L4")
    runs = telemetry_refresh_create(now=NOW)
    # Parts of 400, one per live worker slot at a time, every one read once.
    assert [len(r.params["deployments"]) for r in runs] == [400, 400, 200]
    assert [n for r in runs for n in r.params["deployments"]] == names
    for run in runs:
        assert len(run.target) <= TARGET_LENGTH and run.target.endswith(" more")
        # This hour and the two before, to the end of this one.
        assert (run.window_start, run.window_end) == (
            NOW.replace(minute=0) - timedelta(hours=2),
            NOW.replace(minute=0) + timedelta(hours=1),
        )
    assert runs[0].target.startswith("deployment-0000,")


def test_the_refresh_task_reads_the_first_part_and_sends_the_others(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """The beat's task reads one part itself and sends the others, one task
    each, to the live queue (tests/foundation/test_compose.py checks the
    route), where every free live slot takes one."""
    from costapp.models import IngestRun
    from costapp.telemetry.tasks import telemetry_refresh_task
    from tests.support.services import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: each part fails
    settings.PROMETHEUS_URL = url
    settings.PROMETHEUS_TIMEOUT_S = 2.0
    settings.TELEMETRY_REFRESH_SPLIT = 2
    for i in range(5):
        Deployment.objects.create(
            name=f"d{i}", model_name="m", gpu_type="L4", prometheus_selector='a="b"'
        )
    with django_capture_on_commit_callbacks(execute=False) as sent:
        ids = telemetry_refresh_task()
    assert len(ids) == 3
    runs = {r.pk: r for r in IngestRun.objects.filter(pk__in=ids)}
    # The first part was read in the task; the two others wait for a slot.
    assert runs[ids[0]].status == IngestRun.FAILED
    assert f"cannot reach Prometheus at {url}" in runs[ids[0]].error
    assert {runs[i].status for i in ids[1:]} == {IngestRun.QUEUED}
    assert len(sent) == 2
    for callback in sent:
        callback()  # no broker in tests: the task runs here
    assert set(
        IngestRun.objects.filter(pk__in=ids).values_list("status", flat=True)
    ) == {IngestRun.FAILED}
