"""Error pages in the product's layout; 500.html renders with no context."""

from __future__ import annotations

import pytest
from django.template import engines
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_the_500_page_renders_without_a_context_in_the_product_layout() -> None:
    # As django.views.defaults.server_error does: no request, no context.
    html = engines["django"].get_template("500.html").render({})
    assert 'class="topbar"' in html and "/static/costapp/app.css" in html
    assert "Something went wrong on our side" in html
    assert "{%" not in html and "{{" not in html


def test_a_missing_page_is_a_404_in_the_layout_naming_the_path(
    client: Client, settings: object
) -> None:
    settings.DEBUG = False  # type: ignore[attr-defined]
    client.force_login(user_in("fin", "finance"))
    response = client.get("/costs/no-such-page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "There is no such page" in body and 'class="topbar"' in body
    assert "/costs/no-such-page/" in body
