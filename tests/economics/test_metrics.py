"""/metrics: the stored figures in the Prometheus text format, behind a token;
scraped by a real Prometheus."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from costapp.economics.metrics import latest_figures
from costapp.economics.services import unit_costs_recompute
from costapp.models import UnitCostFigure
from tests.economics import world as w
from tests.support.services import free_port, require_binary, stop, wait_for

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
    for f in latest_figures():
        labels = labels_of(f, teams)
        for field, name in (
            ("cost_per_1k_requests", "costapp_cost_per_1k_requests_dollars"),
            ("cost_per_1m_tokens", "costapp_cost_per_1m_tokens_dollars"),
            ("baseline", "costapp_cost_per_1k_requests_baseline_dollars"),
            ("baseline_per_1m_tokens", "costapp_cost_per_1m_tokens_baseline_dollars"),
            ("upper", "costapp_cost_per_1k_requests_upper_dollars"),
            ("idle_cost", "costapp_idle_dollars"),
        ):
            value = getattr(f, field)
            if value is not None:
                out[(name, labels)] = float(value)
    return out


@pytest.mark.django_db
def test_metrics_need_the_token_and_show_the_stored_figures(
    world: w.World, settings: Any
) -> None:
    unit_costs_recompute(now=NOW)
    client = Client()
    settings.COSTAPP_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404  # off until a token is set
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


@pytest.mark.integration
def test_a_real_prometheus_scrapes_metrics_with_a_bearer_token(
    transactional_db: None, live_server: Any, settings: Any, tmp_path: Any
) -> None:
    prometheus = require_binary("prometheus")
    settings.COSTAPP_METRICS_TOKEN = TOKEN
    w.build_world()
    unit_costs_recompute(now=NOW)
    target = live_server.url.split("//", 1)[1]
    _host, port = target.rsplit(":", 1)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: costapp\n"
        "    metrics_path: /metrics\n"
        f"    authorization: {{type: Bearer, credentials: {TOKEN}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    prom_port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            prometheus,
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            f"--config.file={config}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{prom_port}"

    def query(q: str) -> list[dict[str, Any]]:
        body = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=5)
        return list(body.json()["data"]["result"])

    try:
        wait_for(
            lambda: any(r["value"][1] == "1" for r in query('up{job="costapp"}')),
            timeout=60,
            what="a successful scrape",
        )
        wait_for(
            lambda: bool(query("costapp_cost_per_1k_requests_dollars")),
            timeout=30,
            what="the scraped unit costs",
        )
        scraped = {}
        for name in (
            "costapp_cost_per_1k_requests_dollars",
            "costapp_cost_per_1k_requests_baseline_dollars",
            "costapp_idle_dollars",
        ):
            for r in query(name):
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
    finally:
        stop(proc)
        log.close()
