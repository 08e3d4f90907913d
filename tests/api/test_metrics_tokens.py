"""/metrics takes a user's token with the metrics scope (its user must be
allowed to read unit costs), beside COSTAPP_METRICS_TOKEN."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from costapp.api.tokens import api_token_create
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import ApiToken, UnitCostFigure
from tests.api.conftest import NOW, TokenFor
from tests.economics import world as w
from tests.support.prometheus import scraping_costapp
from tests.support.services import wait_for
from tests.support.users import user_in

pytestmark = pytest.mark.django_db


def scrape(token: str | None) -> Any:
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", **extra)


def test_a_metrics_token_scrapes_and_others_do_not(
    world: w.World, token_for: TokenFor, settings: Any
) -> None:
    settings.COSTAPP_METRICS_TOKEN = ""
    assert scrape(None).status_code == 401  # no token of any kind yet
    finance = token_for("finance", scopes=("metrics",))
    assert scrape(None).status_code == 401
    response = scrape(finance)
    assert response.status_code == 200
    assert "costapp_cost_per_1k_requests_dollars" in response.content.decode()
    assert scrape(token_for("finance", scopes=("api",))).status_code == 401
    assert scrape(token_for(scopes=("metrics",))).status_code == 403  # no role
    ApiToken.objects.filter(prefix=finance[:12]).update(revoked_at="2026-01-01T00:00Z")
    assert scrape(finance).status_code == 401


def test_the_deployment_token_still_works_beside_user_tokens(
    world: w.World, token_for: TokenFor, settings: Any
) -> None:
    settings.COSTAPP_METRICS_TOKEN = "a-deployment-wide-token"
    assert scrape("a-deployment-wide-token").status_code == 200
    assert scrape(token_for("tech lead", scopes=("metrics",))).status_code == 200
    assert scrape("cst_wrong").status_code == 401


@pytest.mark.integration
def test_a_real_prometheus_scrapes_with_a_users_metrics_token(
    transactional_db: None, live_server: Any, settings: Any, tmp_path: Path
) -> None:
    settings.COSTAPP_METRICS_TOKEN = ""  # only the user's token opens /metrics
    w.build_world()
    unit_costs_recompute(now=NOW)
    secret = api_token_create(
        user=user_in("prometheus", "finance"), name="scraper", scopes=["metrics"],
        expires_at=datetime.now(UTC) + timedelta(days=1),
    ).secret  # fmt: skip
    (tmp_path / "token").write_text(secret)
    with scraping_costapp(
        tmp_path, live_server.url, credentials_file=tmp_path / "token"
    ) as prometheus:
        wait_for(
            lambda: bool(
                prometheus.query(
                    'costapp_unit_cost_idle_dollars{deployment="",team="",clock="final"}'
                )
            ),
            timeout=60,
            what="a scrape with the user's token",
        )
        (fleet,) = prometheus.query(
            'costapp_unit_cost_idle_dollars{deployment="",team="",clock="final"}'
        )
        stored = (
            UnitCostFigure.objects.filter(scope="fleet", grain="day", clock="final")
            .latest("period_start")
            .idle_cost
        )
        assert float(fleet["value"][1]) == pytest.approx(float(stored), rel=1e-12)
        token = ApiToken.objects.get(prefix=secret[:12])
        assert token.last_used_at is not None  # the scrape is the token's use
