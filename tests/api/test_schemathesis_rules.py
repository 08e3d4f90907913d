"""The rules tests/api/schemathesis_hooks.py drops cases for are the ones
docs/api.md lists, by the same names; its copied caps are the API's; each rule
is a 400 from the API, and the same query without the break is a 200 (so the
hook drops no case the API would take)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

from costapp.api import query
from costapp.economics.forms import DEFAULT_DAYS as PAGE_DEFAULT_DAYS
from costapp.economics.forms import MAX_DAYS as PAGE_MAX_DAYS
from costapp.models import Deployment
from costapp.validation import MAX_DATE, MIN_DATE
from tests.api import schemathesis_hooks as hooks
from tests.api.conftest import TokenFor
from tests.api.helpers import api_get

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
TODAY = date(2026, 11, 30)


def documented_rules() -> list[str]:
    section = DOCS.read_text().split("## Rules the schema cannot state", 1)[1]
    section = section.split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE)


def test_the_hooks_rules_are_the_ones_docs_api_md_lists() -> None:
    assert documented_rules() == list(hooks.RULES)


def test_the_hooks_caps_and_defaults_are_the_apis() -> None:
    assert hooks.FIGURE_MAX_DAYS == query.MAX_DAYS
    assert hooks.MAX_DAYS == {
        "unit-costs/": query.MAX_DAYS,
        "baselines/": query.MAX_DAYS,
        "spend/": query.SpendQuery.max_days,
        "idle/": query.PoolQuery.max_days,
        "moved/": query.MovedQuery.max_days,
        "alerts/events/": query.EventQuery.max_days,
        "overview/": PAGE_MAX_DAYS["day"],
    }
    assert hooks.DEFAULT_DAYS == {"overview/": PAGE_DEFAULT_DAYS["day"]}
    assert query.DEFAULT_DAYS == 30


def test_the_schemas_day_pattern_is_the_supported_range() -> None:
    day = re.compile(query.DAY_PATTERN)
    for inside in (MIN_DATE, MAX_DATE, date(2026, 2, 28)):
        assert day.fullmatch(inside.isoformat()), inside
    for outside in (MIN_DATE - timedelta(days=1), MAX_DATE + timedelta(days=1)):
        assert not day.fullmatch(outside.isoformat()), outside
    assert not day.fullmatch("2026-13-01") and not day.fullmatch("2026-11-00")


# (endpoint, a query breaking the rule, the same query kept within it)
BROKEN = {
    "end-after-start": (
        "idle/",
        {"start": "2026-11-10", "end": "2026-11-10"},
        {"start": "2026-11-10", "end": "2026-11-11"},
    ),
    "window-cap": (
        "unit-costs/",
        {"grain": "hour", "start": "2026-10-01", "end": "2026-11-02"},
        {"grain": "hour", "start": "2026-10-02", "end": "2026-11-02"},
    ),
    "preset-without-days": (
        "overview/",
        {"preset": "7d", "end": "2026-11-20"},
        {"preset": "custom", "end": "2026-11-20"},
    ),
    "name-needs-scope": (
        "moved/",
        {"name": "chat"},
        {"name": "chat", "scope": "deployment"},
    ),
    "names-of-the-fleet": ("overview/", {"team": "nobody"}, {"team": "search"}),
}
# Rules met only through a default: a lone start after the default end, a
# lone start before the cap, and the same at the overview's own defaults.
BY_DEFAULT = [
    ("end-after-start", "alerts/events/", {"start": "2026-12-01"}, {"start": "2026-11-30"}),
    ("end-after-start", "overview/", {"start": "2026-11-30"}, {"start": "2026-11-29"}),
    ("window-cap", "spend/", {"start": "2026-08-29"}, {"start": "2026-08-30"}),
    ("window-cap", "overview/", {"end": "2026-11-30", "start": "2023-11-27"},
     {"end": "2026-11-30", "start": "2023-11-28"}),
]  # fmt: skip
CASES = [(rule, *case) for rule, case in BROKEN.items()] + BY_DEFAULT


def test_every_rule_has_a_case() -> None:
    assert set(BROKEN) == set(hooks.RULES)


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "endpoint", "broken", "kept"), CASES)
def test_a_broken_rule_is_a_400_and_the_query_within_it_a_200(
    token_for: TokenFor,
    monkeypatch: pytest.MonkeyPatch,
    rule: str,
    endpoint: str,
    broken: dict[str, str],
    kept: dict[str, str],
) -> None:
    Deployment.objects.create(
        name="chat", team="search", model_name="m", gpu_type="H100"
    )
    monkeypatch.setenv("COSTAPP_ST_TEAMS", "search")
    monkeypatch.setenv("COSTAPP_ST_DEPLOYMENTS", "chat")
    token = token_for("tech lead")
    assert hooks.broken(endpoint, broken, TODAY) == [rule]
    assert hooks.broken(endpoint, kept, TODAY) == []
    with time_machine.travel(datetime(2026, 11, 30, 6, tzinfo=UTC), tick=False):
        refused = api_get(f"/api/v1/{endpoint}", token, **broken)
        taken = api_get(f"/api/v1/{endpoint}", token, **kept)
    assert refused.status_code == 400, refused.content
    assert taken.status_code == 200, taken.content
