from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client

from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.fleet.demo_setup import demo_fleet_load, demo_ingest
from costapp.fleet.services import rate_card_seed
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def lead(client: Client) -> Client:
    client.force_login(user_in("lead", "tech lead", password="pw"))
    return client


def test_the_overview_without_data_says_how_to_get_some(lead: Client) -> None:
    response = lead.get("/")
    assert response.status_code == 200
    assert b"manage.py demo" in response.content


@time_machine.travel(NOW, tick=False)
def test_the_overview_and_deployment_pages_show_the_demo(lead: Client) -> None:
    demo_fleet_load()
    rate_card_seed()
    demo_ingest(end=NOW.replace(hour=0), days=3)
    # As ``manage.py demo`` (and the ingest task) does: the overview reads
    # the stored figures the recompute writes.
    unit_costs_recompute(now=NOW)
    page = lead.get("/").content.decode()
    figure = json.loads(
        re.search(
            r'<script id="cost-per-1k-figure" type="application/json">(.*?)</script>',
            page,
            re.S,
        ).group(1)
    )
    assert {t["name"] for t in figure["data"]} == {
        "chat",
        "classify",
        "code-assist",
        "moderation",
        "summarize",
    }
    assert figure["data"][0]["x"] == ["2026-11-27", "2026-11-28", "2026-11-29"]
    assert 'data-deployment="chat"' in page and "$" in page
    detail = lead.get("/fleet/chat/")
    assert detail.status_code == 200
    assert b"deployment-figures" in detail.content
    assert lead.get("/fleet/").status_code == 200


def test_an_unknown_deployment_is_a_404_not_a_500(lead: Client) -> None:
    assert lead.get("/fleet/nope/").status_code == 404
