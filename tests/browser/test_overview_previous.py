"""The overview at 7 days in headless Chromium on the demo (issue 24): the
spend and requests cards' "vs" figures are the API's previous week, to the
cent as displayed, for the same user through a token of their own. ("What
moved" listing every deployment with its parts summing to each change is
tests/browser/test_pages.py's.)"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest

from costapp.formatting import count_short, money
from tests.browser.conftest import ROLES, Demo
from tests.support.services import PYTHON, ROOT, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CARDS = """
return [...document.querySelectorAll('#kpis .kpi')].map(k => {
  const prev = k.querySelector('[data-col="previous"]');
  return {label: k.querySelector('.label').firstChild.textContent.trim(),
          previous: prev.textContent.trim(), previous_raw: prev.dataset.value};
});
"""


def token_of(demo: Demo, username: str) -> str:
    """A day's API token for the demo user, made in the demo's database."""
    code = (
        "from datetime import UTC, datetime, timedelta\n"
        "from django.contrib.auth.models import User\n"
        "from costapp.api.tokens import api_token_create\n"
        f"user = User.objects.get(username={username!r})\n"
        "print(api_token_create(user=user, name='browser', scopes=['api'],"
        " expires_at=datetime.now(UTC) + timedelta(days=1)).secret)\n"
    )
    made = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=demo.env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return made.stdout.strip().splitlines()[-1]


def api_cards(demo: Demo, token: str, query: str) -> dict[str, dict[str, Any]]:
    request = urllib.request.Request(
        f"{demo.url}/api/v1/overview/?{query}",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.load(response)
    return {row["label"]: row for row in body["results"]}


def test_the_overview_at_7_days_shows_the_apis_previous_week(
    demo: Demo, drivers: Any
) -> None:
    d = drivers["finance"]
    d.get(demo.url + "/?preset=7d")
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",
        timeout=60,
        what="the overview",
    )
    shown = {c["label"]: c for c in d.execute_script(CARDS)}
    found = api_cards(demo, token_of(demo, ROLES["finance"]), "preset=7d")
    assert set(shown) == set(found)
    spend, requests = found["Spend, last 7 days"], found["Requests, last 7 days"]
    # A whole previous week of the demo's 30 days, never a cut-off one.
    assert spend["previous_covered"] == spend["days"] == 7
    assert spend["previous"] is not None and Decimal(spend["previous"]) > 0
    assert spend["partial_today"] is False
    page_spend = shown["Spend, last 7 days"]
    assert page_spend["previous"] == money(Decimal(spend["previous"]), "USD")
    assert Decimal(page_spend["previous_raw"]) == Decimal(spend["previous"])
    page_requests = shown["Requests, last 7 days"]
    assert page_requests["previous"] == count_short(float(requests["previous"]))
    assert Decimal(page_requests["previous_raw"]) == Decimal(requests["previous"])
    # Every card, as displayed.
    for label, card in found.items():
        assert Decimal(shown[label]["previous_raw"]) == Decimal(card["previous"]), label
    # The page names the same days as the API.
    kpis = d.find_element("id", "kpi-basis").text
    last = date.fromisoformat(spend["previous_end"]) - timedelta(days=1)
    assert f"the 7 days before ({spend['previous_start']} to {last})" in kpis, kpis
