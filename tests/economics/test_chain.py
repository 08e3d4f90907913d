"""The pipeline order: an ingest that succeeds queues the recompute of what it
changed once its rows are committed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costapp.fleet.demo import demo_fleet_load
from costapp.fleet.services import rate_card_seed
from costapp.ingest import ingest_run_create
from costapp.models import IngestRun, UnitCostFigure
from costapp.sources.base import Window
from costapp.tasks import ingest_run_task

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)


def test_a_successful_ingest_queues_the_recompute_after_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    demo_fleet_load()
    rate_card_seed()
    run = ingest_run_create(
        source="demo",
        window=Window(END - timedelta(days=3), END),
        target="demo fleet",
        params={"seed": 7, "days": 3},
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert ingest_run_task(run.pk) == IngestRun.SUCCEEDED
    assert not UnitCostFigure.objects.exists()  # nothing before the commit
    assert callbacks, "the recompute was not queued"
    for callback in callbacks:
        callback()  # the commit: Celery runs eagerly in the tests
    days = UnitCostFigure.objects.filter(grain="day", scope="deployment")
    assert {f.period_start for f in days} == {
        END - timedelta(days=k) for k in (1, 2, 3)
    }
    assert UnitCostFigure.objects.filter(scope="fleet", grain="hour").count() == 72
