"""The pipeline order: an ingest that succeeds queues what follows its data
(costapp.pipeline.steps) once its rows are committed, and each step queues
the next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from costapp.fleet.demo_setup import demo_fleet_load
from costapp.fleet.services import rate_card_seed
from costapp.ingest import ingest_run_create
from costapp.models import IngestRun, PipelineStep, UnitCostFigure
from costapp.pipeline.steps import STEPS
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
    assert len(callbacks) == 2, "the entry steps (rollups, cost shares) were not queued"
    # The commit: Celery runs eagerly in the tests, each step queueing the next.
    with django_capture_on_commit_callbacks(execute=True) as chained:
        for callback in callbacks:
            callback()
    assert len(chained) >= 4  # unit costs, then alerts, idle and forecasts
    assert not PipelineStep.objects.exclude(pending=None).exists()
    done = PipelineStep.objects.filter(consumed__gt=0).values_list("name", flat=True)
    assert set(done) == set(STEPS)
    days = UnitCostFigure.objects.filter(grain="day", scope="deployment")
    assert {f.period_start for f in days} == {
        END - timedelta(days=k) for k in (1, 2, 3)
    }
    assert UnitCostFigure.objects.filter(scope="fleet", grain="hour").count() == 72


def test_a_successful_focus_import_queues_the_recompute_of_every_series_after_commit(
    django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Any
) -> None:
    from costapp.costs.services import focus_import_create
    from costapp.costs.tasks import focus_import_task
    from costapp.models import CostLine
    from tests.costs.test_focus import SAMPLE

    settings.COSTAPP_UPLOAD_DIR = tmp_path
    upload = tmp_path / "focus.csv"
    upload.write_bytes(SAMPLE.read_bytes())
    run = focus_import_create(upload=upload, name="focus.csv")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert focus_import_task(run.pk) == IngestRun.SUCCEEDED
    assert not upload.exists()  # the upload is still removed
    assert not UnitCostFigure.objects.exists()  # nothing before the commit
    assert len(callbacks) == 1, "the cost shares step was not queued"
    with django_capture_on_commit_callbacks(execute=True):
        callbacks[0]()  # the commit: Celery runs eagerly in the tests
    # No deployment in the file's account: every dollar is unallocated, the
    # fleet's, one day figure per UTC day of the bill.
    bill_days = {line.period_start for line in CostLine.objects.only("period_start")}
    fleet = UnitCostFigure.objects.filter(scope="fleet", grain="day")
    assert bill_days
    assert {f.period_start for f in fleet} == bill_days


def test_a_failed_focus_import_queues_nothing(
    django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Any
) -> None:
    from costapp.costs.services import focus_import_create
    from costapp.costs.tasks import focus_import_task

    settings.COSTAPP_UPLOAD_DIR = tmp_path
    upload = tmp_path / "focus.csv"
    upload.write_bytes(b"not,focus\n1,2\n")
    run = focus_import_create(upload=upload, name="focus.csv")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert focus_import_task(run.pk) == IngestRun.FAILED
    assert callbacks == []
