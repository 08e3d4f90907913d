"""The overview's cards through the API (issue 24): for every window of 1 to
14 days and each preset, each card's previous period is the direct sum over
as many complete days before the cards' own, as the page shows it; today
enters only on request, and then says so.

The expected figures are summed from the world's bill lines and telemetry
hours (``direct_sums`` of tests/economics/test_overview_comparisons.py), never
through the read under test. The world is built once for the module: every
test only reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.db import transaction
from django.test import Client

from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.filters import PRESETS, preset_window
from tests.api.conftest import TokenFor
from tests.api.helpers import all_rows, api_get
from tests.economics import world as w
from tests.economics.test_overview_comparisons import (
    ENDS,
    NAMES,
    NOW,
    TODAY,
    cards,
    direct_sums,
)
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

PATH = "/api/v1/overview/"
PRESET_KEYS = [k for k in PRESETS if k != "custom"]


@pytest.fixture(scope="module")
def built(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The world and its figures, in a transaction rolled back after the
    module; each test runs in a savepoint inside it."""
    with django_db_blocker.unblock(), transaction.atomic():
        w.build_world()
        unit_costs_recompute(now=NOW)
        yield
        transaction.set_rollback(True)


@pytest.fixture
def now() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def cards_of(token: str, **params: str) -> dict[str, dict[str, Any]]:
    return {r["card"]: r for r in all_rows(PATH, token, **params)}


def assert_previous_is_the_direct_sum(
    found: dict[str, dict[str, Any]], end: date, days: int, names: tuple[str, ...]
) -> None:
    n = min(7, days)
    start = end - timedelta(n)
    cost, count = direct_sums(start - timedelta(n), start, names)
    assert set(found) == {
        "spend",
        "cost_per_1k_requests",
        "cost_per_1m_tokens",
        "requests",
    }
    for card in found.values():
        assert (card["start"], card["end"]) == (start.isoformat(), end.isoformat())
        assert (card["previous_start"], card["previous_end"]) == (
            (start - timedelta(n)).isoformat(),
            start.isoformat(),
        )
        assert card["days"] == card["previous_covered"] == n
        assert card["basis"] == "direct" and card["currency"] == "USD"
        assert card["partial_today"] is False
    spend, per_1k = found["spend"], found["cost_per_1k_requests"]
    assert spend["label"] == f"Spend, last {n} day{'s' if n > 1 else ''}"
    assert float(spend["previous"]) == pytest.approx(cost, rel=1e-9, abs=1e-6)
    assert float(found["requests"]["previous"]) == pytest.approx(count, rel=1e-9)
    assert float(per_1k["previous"]) == pytest.approx(cost / count * 1000, rel=1e-9)


@pytest.mark.parametrize("end", ENDS, ids=lambda d: d.isoformat())
@pytest.mark.parametrize("days", range(1, 15))
def test_every_window_compares_with_the_direct_sum_over_as_many_days_before(
    built: None, now: None, token_for: TokenFor, days: int, end: date
) -> None:
    start = end - timedelta(days)
    found = cards_of(token_for("finance"), start=start.isoformat(), end=end.isoformat())
    assert_previous_is_the_direct_sum(found, end, days, NAMES)
    want = {
        "final" if (d - w.START).days < w.ESTIMATED_DAY else "estimated"
        if (d - w.START).days == w.ESTIMATED_DAY else "provisional"
        for d in (end - timedelta(min(7, days) * 2 - i) for i in range(min(7, days)))
    }  # fmt: skip
    assert set(found["spend"]["previous_clocks"].split("+")) == want


def page_cards(query: dict[str, str]) -> dict[str, tuple[float, float]]:
    client = Client()
    client.force_login(user_in("overview-page-reader", "finance"))
    return cards(client.get("/", query).content.decode())


@pytest.mark.parametrize("preset", PRESET_KEYS)
def test_each_preset_ends_at_the_last_complete_day_and_matches_the_page(
    built: None, now: None, token_for: TokenFor, preset: str
) -> None:
    found = cards_of(token_for("tech lead"), preset=preset)
    start, end = preset_window(preset, TODAY)
    assert end <= TODAY
    assert {(c["window_start"], c["window_end"]) for c in found.values()} == {
        (start.isoformat(), end.isoformat())
    }
    assert_previous_is_the_direct_sum(found, end, (end - start).days, NAMES)
    # The same numbers the page shows: its read is the API's.
    shown = page_cards({"preset": preset})
    for card in found.values():
        value, previous = shown[card["label"]]
        assert Decimal(card["value"]) == Decimal(repr(value)), card["card"]
        assert Decimal(card["previous"]) == Decimal(repr(previous)), card["card"]


def test_the_default_window_is_the_pages_90_days(
    built: None, now: None, token_for: TokenFor
) -> None:
    token = token_for("finance")
    assert all_rows(PATH, token) == all_rows(PATH, token, preset="90d")


def test_today_enters_only_on_request_and_is_labelled_partial(
    built: None, now: None, token_for: TokenFor
) -> None:
    end = TODAY + timedelta(1)
    found = cards_of(token_for("finance"), start="2026-10-06", end=end.isoformat())
    for card in found.values():
        assert card["partial_today"] is True
        # Today has no figure yet: six of the seven days do.
        assert (card["days"], card["covered"]) == (7, 6)


def test_a_team_compares_its_own_deployments_days(
    built: None, now: None, token_for: TokenFor
) -> None:
    end = w.START + timedelta(20)
    found = cards_of(
        token_for("finance"),
        start=(end - timedelta(3)).isoformat(),
        end=end.isoformat(),
        team="t2",
    )
    assert_previous_is_the_direct_sum(found, end, 3, ("a",))
    one = cards_of(
        token_for("finance"),
        start=(end - timedelta(3)).isoformat(),
        end=end.isoformat(),
        deployment="a",
    )
    assert one["spend"]["previous"] == found["spend"]["previous"]


def test_with_no_figure_before_the_cards_the_previous_is_null_not_zero(
    built: None, now: None, token_for: TokenFor
) -> None:
    end = w.START + timedelta(3)
    found = cards_of(
        token_for("finance"), start=w.START.isoformat(), end=end.isoformat()
    )
    for card in found.values():
        assert card["previous"] is None and card["change"] is None, card
        assert card["previous_covered"] == 0


@pytest.mark.parametrize(
    ("params", "field", "quoted"),
    [
        ({"preset": "week"}, "preset", "preset='week'"),
        ({"preset": "7d", "start": "2026-10-01"}, "preset", "preset='7d'"),
        ({"start": "2020-01-01", "end": "2026-01-01"}, "start", "at most 1098"),
        ({"start": "2026-10-05", "end": "2026-10-05"}, "end", "must be after"),
        ({"end": "2026-13-01"}, "end", "end='2026-13-01'"),
        ({"team": "nope"}, "team", "team='nope': not a team of the fleet"),
        ({"deployment": "a;b"}, "deployment", "deployment='a;b'"),
        ({"deployment": "gone"}, "deployment", "deployment='gone'"),
        ({"grain": "hour"}, "grain", "'grain': not a parameter here"),
    ],
)
def test_bad_parameters_are_refused_naming_field_and_value(
    built: None, token_for: TokenFor, params: dict[str, str], field: str, quoted: str
) -> None:
    response = api_get(PATH, token_for("finance"), **params)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and any(quoted in m for m in errors[field]), errors


def test_it_needs_the_overview_right_and_a_token(
    built: None, token_for: TokenFor
) -> None:
    assert api_get(PATH, None).status_code == 401
    assert api_get(PATH, token_for()).status_code == 403
    client = Client()
    client.force_login(user_in("overview-session", "finance"))
    assert client.get(PATH).status_code == 401  # a session is not a token
