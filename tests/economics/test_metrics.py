"""/metrics: the stored figures in the Prometheus text format, behind a token;
scraped by a real Prometheus."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from costapp.api.metrics import latest_figures_read
from costapp.economics.idle.services import idle_figures_recompute
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import UnitCostFigure
from costapp.models.economics import IdleFigure
from tests.economics import world as w
from tests.support.prometheus import scraping_costapp
from tests.support.services import wait_for

TOKEN = "a-metrics-token-for-tests-only"
NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def labels_of(f: UnitCostFigure, teams: dict[str, str]) -> tuple[tuple[str, str], ...]:
    deployment = f.name if f.scope == "deployment" else ""
    team = teams.get(f.name, "") if f.scope == "deployment" else ""
    if f.scope == "team":
        team = f.name
    return tuple(
        sorted(
            {
                "deployment": deployment,
                "team": team,
                "clock": f.clock,
                "currency": f.currency,
            }.items()
        )
    )


def expected_samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    teams = {"solo": "t1", "a": "t2", "b": "t3"}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for f in latest_figures_read():
        labels = labels_of(f, teams)
        for field, name in (
            ("cost_per_1k_requests", "costapp_cost_per_1k_requests_dollars"),
            ("cost_per_1m_tokens", "costapp_cost_per_1m_tokens_dollars"),
            ("baseline", "costapp_cost_per_1k_requests_baseline_dollars"),
            ("baseline_per_1m_tokens", "costapp_cost_per_1m_tokens_baseline_dollars"),
            ("upper", "costapp_cost_per_1k_requests_upper_dollars"),
            ("idle_cost", "costapp_unit_cost_idle_dollars"),
        ):
            value = getattr(f, field)
            if value is not None:
                out[(name, labels)] = float(value)
    return out


IDLE_KEYS = ("currency", "deployment", "kind", "method", "pool", "team")
MEMBERS = {"solo": ("t1", ""), "a": ("t2", "p"), "b": ("t3", "p")}


def expected_idle(today_: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Per stored idle series, its last row before world day ``today_``,
    picked in Python from every row (not with the collector's query)."""
    today = w.START + timedelta(days=today_)
    last: dict[tuple[str, str, str, str], IdleFigure] = {}
    for f in IdleFigure.objects.filter(day__lt=today).order_by("day"):
        last[(f.scope, f.name, f.kind, f.currency)] = f
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for f in last.values():
        team, pool = MEMBERS[f.name] if f.scope == "deployment" else ("", f.name)
        labels = tuple(sorted({
            "deployment": f.name if f.scope == "deployment" else "", "pool": pool,
            "team": team, "kind": f.kind, "method": f.method, "currency": f.currency,
        }.items()))  # fmt: skip
        if f.amount is not None:
            out[("costapp_idle_dollars", labels)] = float(f.amount)
        if f.gpu_hours is not None:
            out[("costapp_idle_gpu_hours", labels)] = f.gpu_hours
        end = datetime.combine(f.day + timedelta(days=1), datetime.min.time(), UTC)
        out[("costapp_idle_period_end_timestamp_seconds", labels)] = end.timestamp()
    return out


def with_idle(world: w.World) -> None:
    """Give solo a capacity model (a catalogued model on its L4, what vLLM
    reported) and billed instance-hours, so it has headroom and paid idle of
    its own beside the pool's; then store the idle figures."""
    w.solo_runs_a_catalogued_model(world, observed_at=NOW)
    idle_figures_recompute(now=NOW)


@pytest.mark.django_db
def test_metrics_need_the_token_and_show_the_stored_figures(
    world: w.World, settings: Any
) -> None:
    unit_costs_recompute(now=NOW)
    client = Client()
    settings.COSTAPP_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 401  # before any token, too
    settings.COSTAPP_METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    got = samples(response.content.decode())
    want = expected_samples()
    assert len(want) > 20
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    # The bill clock carries the last final day, with its end beside it.
    final = UnitCostFigure.objects.filter(
        scope="deployment", name="solo", grain="day", clock="final"
    ).latest("period_start")
    labels = labels_of(final, {"solo": "t1"})
    end = got[("costapp_unit_cost_period_end_timestamp_seconds", labels)]
    assert end == final.period_start.timestamp() + 86400
    assert final.period_start == w.day_start(w.ESTIMATED_DAY - 1)
    provisional = [k for k in got if ("clock", "provisional") in k[1]]
    assert provisional  # the last hour, on the provisional clock


@pytest.mark.django_db
def test_metrics_show_both_kinds_of_idle_for_the_last_complete_day(
    world: w.World, settings: Any
) -> None:
    unit_costs_recompute(now=NOW)
    with_idle(world)
    settings.COSTAPP_METRICS_TOKEN = TOKEN
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    # Scraped at noon of the world's last day: that day is not over yet, so
    # the series describe the day before it.
    last = w.DAYS - 1
    with time_machine.travel(w.day_start(last) + timedelta(hours=12), tick=False):
        got = samples(client.get("/metrics", **auth).content.decode())
    want = expected_idle(last)
    kinds = {(dict(k[1])["kind"], dict(k[1])["deployment"], dict(k[1])["pool"])
             for k in want if k[0] == "costapp_idle_dollars"}  # fmt: skip
    # Paid idle of the pool and of solo (outside pools); headroom of solo.
    assert {("paid", "", "p"), ("paid", "solo", ""), ("headroom", "solo", "")} <= kinds
    idle = {k: v for k, v in got.items() if k[0].startswith("costapp_idle_")}
    assert idle.keys() == want.keys()
    for key, value in want.items():
        assert idle[key] == pytest.approx(value, rel=1e-12), key
    # The pool's paid idle: 120 of its 192 GPU-hours, 120/192 of $614.40.
    pool_paid = next(v for k, v in want.items() if k[0] == "costapp_idle_dollars"
                     and ("pool", "p") in k[1] and ("kind", "paid") in k[1])  # fmt: skip
    assert pool_paid == pytest.approx(384.0)
    # An unknown amount is no sample, never 0; its day is still announced.
    IdleFigure.objects.filter(name="a", kind="headroom").update(amount=None)
    with time_machine.travel(w.day_start(last) + timedelta(hours=12), tick=False):
        got = samples(client.get("/metrics", **auth).content.decode())
    of_a = [
        k
        for k in got
        if k[0].startswith("costapp_idle_") and ("deployment", "a") in k[1]
    ]
    assert of_a and not [k for k in of_a if k[0] == "costapp_idle_dollars"]
    # The day after, the world's last day is complete and shown.
    with time_machine.travel(w.day_start(last + 1) + timedelta(hours=1), tick=False):
        got = samples(client.get("/metrics", **auth).content.decode())
    ends: dict[str, set[float]] = {}
    for k, v in got.items():
        if k[0] == "costapp_idle_period_end_timestamp_seconds":
            ends.setdefault(dict(k[1])["kind"], set()).add(v)
    # Headroom (telemetry) reaches the last day; paid idle the last billed one.
    assert ends == {
        "headroom": {w.day_start(last + 1).timestamp()},
        "paid": {w.day_start(w.BILLED_DAYS).timestamp()},
    }


@pytest.mark.integration
def test_a_real_prometheus_scrapes_metrics_with_a_bearer_token(
    transactional_db: None, live_server: Any, settings: Any, tmp_path: Any
) -> None:
    settings.COSTAPP_METRICS_TOKEN = TOKEN
    world = w.build_world()
    unit_costs_recompute(now=NOW)
    with_idle(world)
    with scraping_costapp(tmp_path, live_server.url, credentials=TOKEN) as prometheus:
        wait_for(
            lambda: bool(prometheus.query("costapp_cost_per_1k_requests_dollars")),
            timeout=30,
            what="the scraped unit costs",
        )
        scraped = {}
        for name in (
            "costapp_cost_per_1k_requests_dollars",
            "costapp_cost_per_1k_requests_baseline_dollars",
            "costapp_unit_cost_idle_dollars",
        ):
            for r in prometheus.query(name):
                m = r["metric"]
                labels = tuple(
                    sorted((k, m.get(k, "")) for k in ("clock", "currency",
                                                       "deployment", "team"))
                )  # fmt: skip
                scraped[(name, labels)] = float(r["value"][1])
        want = {
            k: v
            for k, v in expected_samples().items()
            if k[0] in {n for n, _ in scraped}
        }
        assert want and scraped.keys() == want.keys()
        for key, value in want.items():
            assert scraped[key] == pytest.approx(value, rel=1e-12), key
        # Idle dollars, both kinds, as stored for the world's last day (the
        # wall clock is past it, so it is complete).
        scraped_idle = {}
        for name in ("costapp_idle_dollars", "costapp_idle_gpu_hours"):
            for r in prometheus.query(name):
                m = r["metric"]
                labels = tuple(sorted((k, m.get(k, "")) for k in IDLE_KEYS))
                scraped_idle[(name, labels)] = float(r["value"][1])
        want_idle = {
            k: v for k, v in expected_idle(w.DAYS).items()
            if k[0] in ("costapp_idle_dollars", "costapp_idle_gpu_hours")
        }  # fmt: skip
        assert {dict(k[1])["kind"] for k in want_idle} == {"paid", "headroom"}
        assert scraped_idle.keys() == want_idle.keys()
        for key, value in want_idle.items():
            assert scraped_idle[key] == pytest.approx(value, rel=1e-12), key
