"""/metrics takes a user's token with the metrics scope (its user must be
allowed to read unit costs), beside COSTAPP_METRICS_TOKEN."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from costapp.models import ApiToken
from tests.api.conftest import TokenFor
from tests.economics import world as w

pytestmark = pytest.mark.django_db


def scrape(token: str | None) -> Any:
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", **extra)


def test_a_metrics_token_scrapes_and_others_do_not(
    world: w.World, token_for: TokenFor, settings: Any
) -> None:
    settings.COSTAPP_METRICS_TOKEN = ""
    assert scrape(None).status_code == 404  # off: no token of any kind
    finance = token_for("finance", scopes=("metrics",))
    assert scrape(None).status_code == 401  # on, now a metrics token exists
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
