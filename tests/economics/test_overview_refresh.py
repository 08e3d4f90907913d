"""The overview reloads itself when asked, at one of its offered periods."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_the_overview_refreshes_itself_only_when_asked_and_bounded(
    client: Client,
) -> None:
    client.force_login(user_in("lead", "tech lead"))
    page = client.get("/", {"refresh": "300", "preset": "7d"}).content.decode()
    assert '<meta http-equiv="refresh" content="300" id="auto-refresh">' in page
    # The choice is in the filter bar, so the link that reloads keeps it.
    assert '<option value="300" selected>' in page
    assert 'id="auto-refresh"' not in client.get("/").content.decode()
    refused = html.unescape(client.get("/", {"refresh": "5"}).content.decode())
    assert 'id="auto-refresh"' not in refused
    assert "refresh='5': is not one of 60, 300, 900" in refused
