"""/metrics answers every request without a valid token with 401 and a
``WWW-Authenticate`` challenge, whether or not a token exists: it used to
answer 404 while none did, which told an anonymous caller whether metrics were
set up. With a valid token, 200."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from costapp.models import ApiToken
from tests.api.conftest import TokenFor

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

DEPLOYMENT_TOKEN = "a-deployment-wide-metrics-token"


def scrape(token: str | None = None, method: str = "get") -> Any:
    extra = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return getattr(Client(), method)("/metrics", **extra)


def assert_challenged(response: Any) -> None:
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="costapp metrics"'
    assert b"costapp_" not in response.content


def test_without_any_token_in_existence_it_is_401_not_404(settings: Any) -> None:
    settings.COSTAPP_METRICS_TOKEN = ""
    assert not ApiToken.objects.exists()
    assert_challenged(scrape())
    assert_challenged(scrape(method="head"))
    assert_challenged(scrape(method="post"))
    assert_challenged(scrape("cst_not-a-token"))
    assert_challenged(Client().get("/metrics", HTTP_AUTHORIZATION="Basic dTpw"))


def test_with_a_users_metrics_token_it_is_401_without_it_and_200_with_it(
    settings: Any, token_for: TokenFor
) -> None:
    settings.COSTAPP_METRICS_TOKEN = ""
    secret = token_for("finance", scopes=("metrics",))
    assert_challenged(scrape())
    assert_challenged(scrape(secret[:-1]))
    response = scrape(secret)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")


def test_with_the_deployment_token_it_is_401_without_it_and_200_with_it(
    settings: Any,
) -> None:
    settings.COSTAPP_METRICS_TOKEN = DEPLOYMENT_TOKEN
    assert_challenged(scrape())
    assert_challenged(scrape(DEPLOYMENT_TOKEN + "x"))
    assert scrape(DEPLOYMENT_TOKEN).status_code == 200
