"""Idle in dollars, both kinds, as stored and shown, checked against raw SQL
over the bill lines and the telemetry rows of the hand-computable world."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client

from analytics.capacity import engine
from costapp.capacity import adapters
from costapp.capacity.selectors import deployment_today
from costapp.capacity.services import calibration_import
from costapp.economics.idle.present import idle_cards_context
from costapp.economics.idle.services import idle_figures_recompute
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import (
    Calibration,
    Deployment,
    DeploymentHour,
)
from costapp.models.economics import IdleFigure, UnitCostFigure
from tests.economics import world as w
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

TODAY = datetime.combine(w.START + timedelta(w.DAYS), datetime.min.time(), UTC)
IDLE_DAY = 4  # solo: no replica for its first 6 hours, 18 of 24 GPU-hours used
HOT_DAY = 5  # solo: one hour far above what one L4 replica carries
PLAIN_DAY = 3
_users = itertools.count()


def client_as(*groups: str) -> Client:
    client = Client()
    client.force_login(user_in(f"idle-user-{next(_users)}", *groups))
    return client


def day(n: int) -> date:
    return w.START + timedelta(days=n)


def sql(query: str, *params: object) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall())


def _prepare(world: w.World) -> None:
    w.solo_runs_a_catalogued_model(world, observed_at=TODAY)
    first = w.day_start(IDLE_DAY)
    DeploymentHour.objects.filter(
        deployment__name="solo", hour__gte=first, hour__lt=first + timedelta(hours=6)
    ).update(
        gpu_seconds=0.0, replicas_mean=0.0, replicas_max=0.0, requests_stop=0.0,
        requests_length=0.0, prompt_tokens=0.0, generation_tokens=0.0,
    )  # fmt: skip
    DeploymentHour.objects.filter(
        deployment__name="solo", hour=w.day_start(HOT_DAY) + timedelta(hours=12)
    ).update(requests_stop=1_000_000.0)
    unit_costs_recompute(now=TODAY)
    idle_figures_recompute(now=TODAY)


@pytest.fixture(scope="module")
def _built(django_db_setup: None, django_db_blocker: Any) -> Iterator[w.World]:
    """The world and its figures, built once for the module (it takes ~15 s)
    inside a transaction rolled back after the module's last test. Each test
    runs in a savepoint within it (the ``db`` fixture's atomic nests), so what
    one test changes is undone before the next: the tests stay independent
    of each other and of their order, as ``TestCase.setUpTestData`` keeps
    them."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
    try:
        with django_db_blocker.unblock():
            world = w.build_world()
            _prepare(world)
        yield world
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def idle_world(_built: w.World, db: None) -> w.World:
    return _built


def figure(scope: str, name: str, n: int, kind: str) -> IdleFigure:
    return IdleFigure.objects.get(scope=scope, name=name, day=day(n), kind=kind)


def test_a_deployment_outside_pools_billed_24_h_and_measuring_18_h_has_6_h_paid_idle(
    idle_world: w.World,
) -> None:
    paid, used = sql(
        "select (select sum(usage_quantity) from costapp_costline where tag_value"
        " = 'solo' and period_start = %s and usage_unit = 'Hrs'),"
        " (select sum(h.gpu_seconds) / 3600 from costapp_deploymenthour h join"
        " costapp_deployment d on d.id = h.deployment_id where d.name = 'solo'"
        " and h.hour >= %s and h.hour < %s)",
        w.day_start(IDLE_DAY), w.day_start(IDLE_DAY), w.day_start(IDLE_DAY + 1),
    )[0]  # fmt: skip
    assert (float(paid), used) == (24.0, 18.0)  # type: ignore[arg-type]
    f = figure("deployment", "solo", IDLE_DAY, "paid")
    assert f.gpu_hours == pytest.approx(6.0)
    # $19.20 for 24 paid GPU-hours: $0.80 each, 6 of them unused.
    assert f.amount == Decimal("4.800000000000")
    assert f.method == "bill" and f.currency == "USD"
    plain = figure("deployment", "solo", PLAIN_DAY, "paid")
    assert plain.gpu_hours == 0.0 and plain.amount == 0


def test_pool_paid_idle_is_its_idle_share_of_the_bill_as_sql_computes_it(
    idle_world: w.World,
) -> None:
    rows = sql(
        "select l.period_start, sum(l.amortized_cost), sum(l.usage_quantity) * 8,"
        " (select sum(h.gpu_seconds) / 3600 from costapp_deploymenthour h join"
        "  costapp_deployment d on d.id = h.deployment_id join costapp_pool p on"
        "  p.id = d.pool_id where p.name = 'p' and h.hour >= l.period_start and"
        "  h.hour < l.period_start + interval '1 day')"
        " from costapp_costline l where l.tag_value = 'p' group by l.period_start"
    )
    assert len(rows) == w.BILLED_DAYS
    for start, amount, paid, used in rows:
        n = (start.date() - w.START).days  # type: ignore[attr-defined]
        f = figure("pool", "p", n, "paid")
        idle = float(paid) - used  # type: ignore[arg-type, operator]
        assert f.gpu_hours == pytest.approx(idle, rel=1e-9)
        assert float(f.amount) == pytest.approx(  # type: ignore[arg-type]
            float(amount) * idle / float(paid),  # type: ignore[arg-type]
            abs=1e-9,
        )
        stored = UnitCostFigure.objects.get(
            scope="pool", name="p", grain="day", period_start=start
        )
        assert f.amount == stored.idle_cost  # the same __idle__ share
    # 192 paid, 72 used on a whole day: 120 idle, $614.40 x 120/192.
    assert figure("pool", "p", PLAIN_DAY, "paid").amount == Decimal("384")
    late = figure("pool", "p", w.LATE_DAY, "paid")  # a's late hour is missing
    assert late.gpu_hours == pytest.approx(122.0)
    assert figure("pool", "p", w.ESTIMATED_DAY, "paid").flags == ["estimated_bill"]


def _capacity(kind: str = "roofline") -> float:
    """What the engine says one solo replica carries, with what is stored."""
    solo = Deployment.objects.get(name="solo")
    last = DeploymentHour.objects.filter(deployment=solo).latest("hour").hour
    today = deployment_today(solo, now=last + timedelta(hours=1))
    assert today.scenario is not None
    cals = adapters.engine_calibrations(Calibration.objects.all())
    result = engine.evaluate(today.scenario, calibrations=cals)
    assert result.starts and result.calibration.kind == kind
    return result.max_requests_per_s_within_sla


def _hour_rows(n: int) -> list[tuple[float, float, float]]:
    return [
        (float(a), float(b), float(c))  # type: ignore[arg-type]
        for a, b, c in sql(
            "select (h.requests_stop + h.requests_length) / 3600.0, h.replicas_mean,"
            " h.gpu_seconds / 3600.0 from costapp_deploymenthour h join"
            " costapp_deployment d on d.id = h.deployment_id where d.name = 'solo'"
            " and h.hour >= %s and h.hour < %s order by h.hour",
            w.day_start(n), w.day_start(n + 1),
        )
    ]  # fmt: skip


def test_headroom_is_the_unneeded_share_of_each_hour_at_70_percent(
    idle_world: w.World,
) -> None:
    cap = _capacity()
    assert cap > 0.1  # one L4 carries far more than solo's 100 requests an hour
    f = figure("deployment", "solo", PLAIN_DAY, "headroom")
    assert f.capacity_per_replica == pytest.approx(cap)
    assert f.method == "roofline" and f.flags == [] and f.target_utilisation == 0.7
    expected = sum(
        max(0.0, 1 - load / (replicas * cap * 0.7)) * gpu
        for load, replicas, gpu in _hour_rows(PLAIN_DAY)
    )
    assert f.gpu_hours == pytest.approx(expected, rel=1e-9)
    # Billed $19.20 for 24 GPU-hours that day: $0.80 per GPU-hour.
    assert float(f.amount) == pytest.approx(expected * 0.8, abs=1e-9)  # type: ignore[arg-type]


def test_headroom_at_a_declared_50_percent_target_keeps_more_replicas_needed(
    idle_world: w.World,
) -> None:
    at_70 = figure("deployment", "solo", PLAIN_DAY, "headroom")
    Deployment.objects.filter(name="solo").update(target_utilisation=0.5)
    idle_figures_recompute(now=TODAY)
    cap = _capacity()
    f = figure("deployment", "solo", PLAIN_DAY, "headroom")
    assert f.target_utilisation == 0.5 and f.method == "roofline"
    rows = _hour_rows(PLAIN_DAY)
    expected = sum(
        max(0.0, 1 - load / (replicas * cap * 0.5)) * gpu
        for load, replicas, gpu in rows
    )
    assert f.gpu_hours == pytest.approx(expected, rel=1e-9)
    assert float(f.amount) == pytest.approx(expected * 0.8, abs=1e-9)  # type: ignore[arg-type]
    # No hour is clipped (solo's load is far below its capacity), so the
    # stricter target costs each hour load / (replicas x cap) x (1/0.5 - 1/0.7)
    # of its GPU-hours.
    assert all(load < replicas * cap * 0.5 for load, replicas, _ in rows)
    lost = sum(load / (r * cap) * (1 / 0.5 - 1 / 0.7) * g for load, r, g in rows)
    assert lost > 0
    assert at_70.gpu_hours - f.gpu_hours == pytest.approx(lost, rel=1e-9)  # type: ignore[operator]
    # The other deployments keep the default.
    assert figure("deployment", "b", PLAIN_DAY, "headroom").target_utilisation == 0.7


# Measured on the L4 slower than the roofline assumes (225 GB/s, 42 TFLOP/s
# decode, 2.1 ms step overhead there), so one replica carries less.
CALIBRATION = {
    "schema_version": 1,
    "kind": "engine_measurements",
    "key": {"gpu": "L4", "model": "Llama-3.2-3B", "tp": 1},
    "params": {
        "t0_s": 0.004,
        "bw_eff_bytes_per_s": 1.2e11,
        "decode_flops_eff": 3.0e13,
        "prefill_flops_eff": 4.0e13,
        "p0_s": 0.01,
    },
    "fit": {"n_points": 6, "mape": 0.04, "r2": 0.98, "method": "least_squares"},
    "source": "vllm bench on one L4 (test)",
}


def test_a_stored_calibration_turns_the_roofline_headroom_into_a_calibrated_one(
    idle_world: w.World,
) -> None:
    roof = _capacity("roofline")
    before = figure("deployment", "solo", PLAIN_DAY, "headroom")
    assert before.method == "roofline"
    assert before.capacity_per_replica == pytest.approx(roof)
    stored = calibration_import(
        content=json.dumps(CALIBRATION), filename="l4-llama-3.2-3b.json"
    )
    assert (stored.kind, stored.gpu_type, stored.model_name) == (
        "engine_bench", "L4", "Llama-3.2-3B",
    )  # fmt: skip
    idle_figures_recompute(now=TODAY)
    cal = _capacity("engine_measurements")
    assert 0 < cal < roof
    f = figure("deployment", "solo", PLAIN_DAY, "headroom")
    assert f.method == "calibrated" and f.flags == []
    assert f.capacity_per_replica == pytest.approx(cal)
    rows = _hour_rows(PLAIN_DAY)
    expected = sum(
        max(0.0, 1 - load / (replicas * cal * 0.7)) * gpu
        for load, replicas, gpu in rows
    )
    assert f.gpu_hours == pytest.approx(expected, rel=1e-9)
    assert float(f.amount) == pytest.approx(expected * 0.8, abs=1e-9)  # type: ignore[arg-type]
    # Unclipped hours: the lower capacity needs load / (replicas x 0.7) x
    # (1/cal - 1/roof) more of each hour's GPU-hours.
    assert all(load < r * cal * 0.7 for load, r, _ in rows)
    more = sum(load / (r * 0.7) * (1 / cal - 1 / roof) * g for load, r, g in rows)
    assert more > 0
    assert before.gpu_hours - f.gpu_hours == pytest.approx(more, rel=1e-9)  # type: ignore[operator]
    # Deployments the calibration does not match stay as they were.
    assert figure("deployment", "a", PLAIN_DAY, "headroom").method == "roofline"


def test_load_above_the_predicted_capacity_is_flagged_and_claims_no_headroom(
    idle_world: w.World,
) -> None:
    cap = _capacity()
    f = figure("deployment", "solo", HOT_DAY, "headroom")
    assert f.flags == ["model_underestimates"]
    rows = _hour_rows(HOT_DAY)
    assert sum(load > replicas * cap for load, replicas, _ in rows) == 1
    expected = sum(
        max(0.0, 1 - load / (replicas * cap * 0.7)) * gpu
        for load, replicas, gpu in rows
        if load <= replicas * cap
    )
    assert f.gpu_hours == pytest.approx(expected, rel=1e-9)
    assert "load above predicted capacity in 1 h" in f.note


def test_without_a_capacity_model_headroom_is_missing_not_zero(
    idle_world: w.World,
) -> None:
    f = figure("deployment", "a", PLAIN_DAY, "headroom")
    assert f.gpu_hours is None and f.amount is None
    assert f.note.startswith("no capacity model")
    pool = figure("pool", "p", PLAIN_DAY, "headroom")
    assert pool.amount is None


def _cell(html: str, series: str, col: str) -> str:
    row = re.search(rf'<tr data-series="{series}"[^>]*>(.*?)</tr>', html, re.S)
    assert row, series
    cell = re.search(rf'data-col="{col}"(?: data-value="([^"]*)")?>(.*?)</td>',
                     row.group(1), re.S)  # fmt: skip
    assert cell, (series, col)
    return cell.group(1) if cell.group(1) is not None else cell.group(2)


def test_the_idle_page_shows_the_sums_sql_finds_and_dashes_where_missing(
    idle_world: w.World,
) -> None:
    start, end = day(0), day(w.DAYS)
    page = client_as("finance").get(
        f"/economics/idle/?start={start.isoformat()}&end={end.isoformat()}"
    )
    assert page.status_code == 200
    html = page.content.decode()
    (pool_paid,) = sql(
        "select sum(amount) from costapp_idlefigure where scope = 'pool' and"
        " name = 'p' and kind = 'paid' and day >= %s and day < %s", start, end,
    )[0]  # fmt: skip
    assert Decimal(_cell(html, "pool/p", "paid")) == pool_paid
    # Raw: bill lines x the idle fraction per day, summed.
    raw = sql(
        "select sum(l.amortized_cost * (1 - (select sum(h.gpu_seconds) / 3600 from"
        " costapp_deploymenthour h join costapp_deployment d on d.id ="
        " h.deployment_id where d.pool_id is not null and h.hour >= l.period_start"
        " and h.hour < l.period_start + interval '1 day') / (l.usage_quantity * 8)))"
        " from costapp_costline l where l.tag_value = 'p'"
    )[0][0]
    assert float(pool_paid) == pytest.approx(float(raw), abs=1e-6)  # type: ignore[arg-type]
    solo_paid = Decimal(_cell(html, "deployment/solo", "paid"))
    assert solo_paid == Decimal("4.8")  # only the idle day has paid idle
    assert _cell(html, "deployment/a", "headroom") == ""  # missing ...
    assert "\u2013" in _cell(
        html, "deployment/a", "headroom_gpu_hours"
    )  # ... shown as an en dash
    assert "model underestimates" in html
    assert "roofline estimate (uncalibrated)" in html
    assert 'id="idle-card-USD"' in html


def test_the_idle_page_is_refused_without_the_overview_right(
    idle_world: w.World,
) -> None:
    assert client_as().get("/economics/idle/").status_code == 403
    assert client_as("tech lead").get("/economics/idle/").status_code == 200


def test_the_overview_shows_the_idle_card(idle_world: w.World) -> None:
    html = (
        client_as("finance")
        .get(f"/?start={day(0).isoformat()}&end={day(w.DAYS).isoformat()}")
        .content.decode()
    )
    assert 'id="idle-card-USD"' in html and "serving headroom" in html


def _snapshot() -> list[tuple[object, ...]]:
    return list(
        IdleFigure.objects.order_by("scope", "name", "day", "kind").values_list(
            "scope", "name", "day", "kind", "currency", "gpu_hours", "amount",
            "method", "flags", "note",
        )
    )  # fmt: skip


def test_an_incremental_recompute_after_a_late_hour_equals_a_full_one(
    idle_world: w.World,
) -> None:
    DeploymentHour.objects.bulk_create(
        [w.hour_row(idle_world.a, w.LATE_DAY, w.LATE_HOUR)]
    )
    since = day(w.LATE_DAY)
    unit_costs_recompute(now=TODAY, since=since, series=["a"])
    idle_figures_recompute(now=TODAY, since=since, series=["a"])
    incremental = _snapshot()
    assert figure("pool", "p", w.LATE_DAY, "paid").gpu_hours == pytest.approx(120.0)
    IdleFigure.objects.all().delete()
    idle_figures_recompute(now=TODAY)
    assert _snapshot() == incremental


def test_the_recompute_command_writes_idle_figures(idle_world: w.World) -> None:
    IdleFigure.objects.all().delete()
    call_command("unit_costs_recompute")
    assert IdleFigure.objects.filter(scope="pool", name="p", kind="paid").count() == (
        w.BILLED_DAYS
    )


def test_the_deployment_card_shows_its_headroom_and_its_pools_paid_idle(
    idle_world: w.World,
) -> None:
    start, end = day(0), day(w.DAYS)
    (solo,) = idle_cards_context(start=start, end=end, deployment=idle_world.solo)
    assert Decimal(solo["paid_raw"]) == Decimal("4.8")
    (pool_paid,) = sql(
        "select sum(amount) from costapp_idlefigure where scope = 'pool' and"
        " kind = 'paid' and day >= %s and day < %s", start, end,
    )[0]  # fmt: skip
    (member,) = idle_cards_context(start=start, end=end, deployment=idle_world.a)
    assert Decimal(member["paid_raw"]) == pool_paid
    assert member["headroom_raw"] == "" and member["title"].endswith(
        "(paid idle: pool p)"
    )
