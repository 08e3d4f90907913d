"""At most one run of a step at a time; what arrives meanwhile is done by one
follow-up. Worker slots are threads here, each with its own connection to
PostgreSQL, racing for the same rows as Celery worker processes do."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection

from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import PipelineStep
from costapp.pipeline.change import Change
from costapp.pipeline.runner import Executed, step_execute
from costapp.pipeline.services import pipeline_request, step_claim
from costapp.pipeline.steps import STEPS
from tests.economics import world as w
from tests.economics.test_recompute import assert_same, snapshot

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = w.day_start(w.DAYS) + timedelta(hours=2)


@pytest.fixture
def world(postgres_only: None) -> w.World:
    return w.build_world()


def _slot(barrier: threading.Barrier, change: Change, out: list[Executed]) -> None:
    """One worker slot: a request, then its task, then the follow-up task
    the step asks for, as pipeline_step_task does."""
    try:
        barrier.wait(timeout=30)
        pipeline_request(steps=["unit_costs"], change=change)
        again = ["unit_costs"]
        while "unit_costs" in again:
            result = step_execute("unit_costs")
            out.append(result)
            again = list(result.again)
    finally:
        connection.close()


def test_five_recomputes_of_one_series_queued_at_once_run_as_at_most_two(
    world: w.World, monkeypatch: pytest.MonkeyPatch
) -> None:
    with time_machine.travel(NOW, tick=False):
        unit_costs_recompute(now=NOW)
    step = STEPS["unit_costs"]
    real = step.run
    changes: list[Change] = []

    def slow(change: Change, now: Any) -> Any:
        changes.append(change)
        time.sleep(0.5)  # long enough for the others to arrive meanwhile
        return real(change, now)

    monkeypatch.setitem(step.__dict__, "run", slow)
    # solo's last day restated from three places at once, with other days.
    sinces = [w.day_start(w.DAYS - k) for k in (1, 2, 1, 3, 1)]
    barrier = threading.Barrier(5)
    results: list[Executed] = []
    with time_machine.travel(NOW + timedelta(minutes=5), tick=True):
        slots = [
            threading.Thread(
                target=_slot,
                args=(barrier, Change.of(since=since, series={"solo"}), results),
            )
            for since in sinces
        ]
        for t in slots:
            t.start()
        for t in slots:
            t.join(120)
    assert not any(t.is_alive() for t in slots)
    assert 1 <= len(changes) <= 2, changes
    assert sum(r.ran for r in results) == len(changes)
    # The earliest day any of them asked for was recomputed.
    assert min(c.since for c in changes if c.since) == min(sinces)
    row = PipelineStep.objects.get(name="unit_costs")
    assert row.pending is None and row.inflight is None and not row.lease_owner
    assert row.consumed == row.requested
    # The same figures as one recompute of everything.
    merged = snapshot()
    monkeypatch.undo()
    with time_machine.travel(NOW + timedelta(minutes=5), tick=False):
        unit_costs_recompute(now=NOW + timedelta(minutes=5))
    assert_same(merged, snapshot())


def test_a_lease_that_ran_out_gives_its_work_to_the_next_claim(
    world: w.World, settings: Any
) -> None:
    change = Change.of(since=w.day_start(30), series={"a"})
    pipeline_request(steps=["unit_costs"], change=change)
    dead = step_claim("unit_costs")  # a worker that claims, then is killed
    assert dead is not None
    pipeline_request(steps=["unit_costs"], change=Change.of(series={"solo"}))
    assert step_claim("unit_costs") is None  # its lease is live: nobody else
    later = PipelineStep.objects.get(name="unit_costs").lease_until
    assert later is not None
    taken = step_claim("unit_costs", now=later + timedelta(seconds=1))
    assert taken is not None
    # Its own work and the dead worker's, merged: nothing is lost.
    assert taken.change.series == {"a", "solo"} and taken.change.since is None
    assert taken.version == PipelineStep.objects.get(name="unit_costs").requested


def test_the_evaluation_waits_while_a_recompute_holds_its_lease(
    world: w.World,
) -> None:
    pipeline_request(steps=["unit_costs", "alerts"], change=Change())
    held = step_claim("unit_costs", exclusive=STEPS["unit_costs"].exclusive)
    assert held is not None
    assert step_claim("alerts", exclusive=STEPS["alerts"].exclusive) is None
    assert PipelineStep.objects.get(name="alerts").pending is not None  # kept
