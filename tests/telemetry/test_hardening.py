"""Telemetry that could not be measured says so, and every input is bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from costapp.models import Deployment, IngestRun
from tests.support.services import free_port
from tests.telemetry.synth import T0

pytestmark = pytest.mark.django_db

DAY = 86400
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
