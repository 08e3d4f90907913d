"""A period is judged only once closed: figures say whether they are complete
(read after their end plus the settle delay), and since when they stood as
they are (``known_since``), which the alert evaluation reads to tell news
from history. And the recompute a refresh triggers equals a full one."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.unit_cost_figures import NOTE_OPEN
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import CostLine, DeploymentHour, IngestRun, UnitCostFigure
from costapp.pipeline.runner import step_execute
from costapp.pipeline.runs import run_followups
from tests.economics import world as w
from tests.economics.test_recompute import assert_same, snapshot

pytestmark = [pytest.mark.django_db]

LAST_DAY = w.DAYS - 1
# The world's telemetry ends at midnight; the refresh runs early next day.
END = w.day_start(w.DAYS)
SETTLE = timedelta(seconds=30)


def _read_by(started: datetime, *, names: list[str], since: datetime) -> IngestRun:
    """A telemetry run that started at ``started`` and wrote the hours of
    ``names`` from ``since`` on (as a refresh does)."""
    run = IngestRun.objects.create(
        source="prometheus",
        target=",".join(names),
        window_start=since,
        window_end=END,
        status=IngestRun.SUCCEEDED,
        started_at=started,
        finished_at=started + timedelta(seconds=5),
        rows_written=1,
    )
    DeploymentHour.objects.filter(
        deployment__name__in=names, hour__gte=since, hour__lt=END
    ).update(run=run)
    return run


def figure(scope: str, name: str, grain: str, start: datetime) -> UnitCostFigure:
    return UnitCostFigure.objects.get(
        scope=scope, name=name, grain=grain, period_start=start, currency="USD"
    )


def test_an_hour_read_before_it_closed_is_partial_and_so_is_all_it_is_part_of(
    world: w.World,
) -> None:
    last_hour = END - timedelta(hours=1)
    # solo's last hour read a quarter of the way in (a quarter of its traffic).
    _read_by(last_hour + timedelta(minutes=15), names=["solo"], since=last_hour)
    DeploymentHour.objects.filter(deployment=world.solo, hour=last_hour).update(
        requests_stop=1.0, requests_length=0.0
    )
    unit_costs_recompute(now=END + timedelta(hours=2))
    partial = figure("deployment", "solo", "hour", last_hour)
    assert not partial.complete and partial.known_since is None
    assert partial.flag == "" and partial.cause == ""  # never judged
    assert NOTE_OPEN in partial.note
    assert partial.cost_per_1k_requests is None or partial.requests == 1.0
    # What it is part of: its day, its team's and the fleet's hour and day.
    for scope, name, grain, start in (
        ("deployment", "solo", "day", w.day_start(LAST_DAY)),
        ("team", "t1", "hour", last_hour),
        ("team", "t1", "day", w.day_start(LAST_DAY)),
        ("fleet", "fleet", "hour", last_hour),
        ("fleet", "fleet", "day", w.day_start(LAST_DAY)),
    ):
        assert not figure(scope, name, grain, start).complete, (scope, grain)
    # Outside it: the pool, other teams, the hour before.
    for scope, name, grain, start in (
        ("pool", "p", "day", w.day_start(LAST_DAY)),
        ("team", "t2", "hour", last_hour),
        ("deployment", "solo", "hour", last_hour - timedelta(hours=1)),
    ):
        assert figure(scope, name, grain, start).complete, (scope, grain)


def test_a_period_whose_end_and_settle_delay_are_not_past_is_partial(
    world: w.World,
) -> None:
    unit_costs_recompute(now=END + SETTLE / 2)
    last_hour = END - timedelta(hours=1)
    assert not figure("deployment", "a", "hour", last_hour).complete
    assert not figure("deployment", "a", "day", w.day_start(LAST_DAY)).complete
    assert figure("deployment", "a", "day", w.day_start(LAST_DAY - 1)).complete
    unit_costs_recompute(now=END + SETTLE)
    assert figure("deployment", "a", "hour", last_hour).complete


def test_known_since_holds_while_the_values_hold_and_moves_when_they_change(
    world: w.World,
) -> None:
    t1 = END + timedelta(hours=1)
    unit_costs_recompute(now=t1)
    assert not UnitCostFigure.objects.filter(complete=True, known_since=None).exists()
    t2 = t1 + timedelta(hours=1)
    unit_costs_recompute(now=t2)  # the same inputs: nothing is news
    complete = UnitCostFigure.objects.filter(complete=True)
    assert set(complete.values_list("known_since", flat=True)) == {t1}
    # October is still going: its month figure is partial, not yet known.
    assert not UnitCostFigure.objects.filter(complete=False).exclude(known_since=None)
    # A restated bill day: its figures (and the pool's, teams', fleet's that
    # day, and the week and month that hold it) are news from t3.
    restated = 20
    CostLine.objects.filter(tag_value="p", period_start=w.day_start(restated)).update(
        amortized_cost=w.POOL_DAY_BILL * 2
    )
    t3 = t2 + timedelta(hours=1)
    unit_costs_recompute(now=t3, since=(w.START + timedelta(restated)))
    day = w.day_start(restated)
    assert figure("pool", "p", "day", day).known_since == t3
    assert figure("deployment", "a", "day", day).known_since == t3
    assert figure("deployment", "solo", "day", day).known_since == t1  # unchanged
    assert figure("pool", "p", "day", day - timedelta(days=1)).known_since == t1


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    hours=st.integers(1, 3),
    names=st.sets(st.sampled_from(["solo", "a", "b"]), min_size=1),
    factor=st.floats(0.25, 4.0),
    late=st.booleans(),
)
def test_the_recompute_after_a_refresh_equals_a_full_recompute(
    world: w.World, hours: int, names: set[str], factor: float, late: bool
) -> None:
    """A refresh rewrites the last hours of some deployments (their traffic
    and GPU-hours moved: a deployment on more GPUs); the pipeline after it
    recomputes what it changed, from the saved baseline state. The result is
    the full recompute's, to 1e-9."""
    before = END + timedelta(hours=1)
    if not UnitCostFigure.objects.exists():  # later examples start from the last
        with time_machine.travel(before, tick=False):
            unit_costs_recompute(now=before)
    since = END - timedelta(hours=hours)
    if late:  # a late hour further back, as remote write delivers one
        since -= timedelta(hours=20)
    DeploymentHour.objects.filter(
        deployment__name__in=names, hour__gte=since, hour__lt=END
    ).update(gpu_seconds=3600.0 * 3 * factor, requests_stop=95.0 * factor)
    at = before + timedelta(minutes=15)
    run = _read_by(at, names=sorted(names), since=since)
    requested = run_followups(run)
    assert set(requested) == {"rollups", "cost_shares"}
    # The steps the refresh's task sends, as a worker runs them (idle and the
    # month forecasts after them read these figures; they are not the point).
    with time_machine.travel(at + timedelta(seconds=10), tick=False):
        ran = [step_execute(s).ran for s in ("cost_shares", "unit_costs")]
    assert ran == [True, True]
    incremental = snapshot()
    with time_machine.travel(at + timedelta(seconds=10), tick=False):
        unit_costs_recompute(now=at + timedelta(seconds=10))
    assert_same(incremental, snapshot())
