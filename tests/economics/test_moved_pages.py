"""The "what moved" page, its per-series explanation and its API endpoint on
the demo: every deployment, team and the fleet, each change equal to a direct
sum over the stored days, its parts summing to it."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from costapp.api.tokens import api_token_create
from costapp.economics.moved import moved_read
from costapp.models import Deployment, UnitCostFigure
from costapp.models.economics import FLEET
from tests.support.demo_data import demo_for_module
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 28
START, STOP = date(2026, 11, 23), date(2026, 11, 30)  # the last 7 complete days
WINDOW = {"preset": "custom", "start": START.isoformat(), "end": STOP.isoformat()}
PARTS = ("price", "fleet", "traffic", "size", "clock")


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=END, days=DAYS):
        yield


@pytest.fixture
def now(demo: None) -> Iterator[None]:
    with time_machine.travel(END + timedelta(hours=6), tick=False):
        yield


_users = itertools.count()


def client_as(*groups: str) -> Client:
    client = Client()
    client.force_login(user_in(f"moved-{next(_users)}", *groups))
    return client


def rows_of(html: str) -> dict[tuple[str, str], dict[str, float]]:
    """Per (scope, name): its change and each part (NaN where shown missing)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for m in re.finditer(
        r'<tr data-scope="(\w+)" data-name="([^"]+)"[^>]*>(.*?)</tr>', html, re.S
    ):
        cells = dict(re.findall(r'data-part="(\w+)" data-value="([^"]*)"', m[3]))
        change = re.search(r'data-change="([^"]*)"', m[3])
        assert change is not None
        values = {k: float(v) if v else math.nan for k, v in cells.items()}
        values["change"] = float(change[1]) if change[1] else math.nan
        out[(m[1], m[2])] = values
    return out


def direct_per_1k(scope: str, name: str, start: date, end: date) -> float:
    """$ per 1k requests summed straight from the stored daily figures."""
    days = UnitCostFigure.objects.filter(
        scope=scope, name=name, grain="day", complete=True,
        period_start__gte=datetime.combine(start, datetime.min.time(), UTC),
        period_start__lt=datetime.combine(end, datetime.min.time(), UTC),
        cost__isnull=False, requests__isnull=False,
    )  # fmt: skip
    cost = sum(float(f.cost) for f in days)
    requests = sum(f.requests for f in days)
    return cost / requests * 1000.0


def test_the_page_lists_every_deployment_team_and_the_fleet_with_parts_summing_to_each_change(
    now: None,
) -> None:
    page = client_as("finance").get("/economics/moved/", WINDOW)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Complete UTC days only" in html
    rows = rows_of(html)
    deployments = set(Deployment.objects.values_list("name", flat=True))
    teams = set(Deployment.objects.exclude(team="").values_list("team", flat=True))
    assert {n for s, n in rows if s == "deployment"} == deployments
    assert {n for s, n in rows if s == "team"} == teams
    assert ("fleet", FLEET) in rows
    decomposed = 0
    for key, r in rows.items():
        if math.isnan(r["change"]):
            continue
        # Each change is the direct sum over the two periods' stored days.
        direct = direct_per_1k(*key, START, STOP) - direct_per_1k(
            *key, START - timedelta(days=7), START
        )
        assert r["change"] == pytest.approx(direct, rel=1e-9), key
        if all(not math.isnan(r[p]) for p in PARTS):
            assert math.fsum(r[p] for p in PARTS) == pytest.approx(
                r["change"], rel=1e-9, abs=1e-12
            ), key
            decomposed += 1
    assert decomposed >= len(deployments)


def test_every_row_links_to_an_explanation_of_that_window_flagged_or_not(
    now: None,
) -> None:
    client = client_as("finance")
    html = client.get("/economics/moved/", WINDOW).content.decode()
    link = re.search(r'href="(/economics/moved/deployment/[^/"]+/\?[^"]+)"', html)
    assert link is not None
    page = client.get(link[1].replace("&amp;", "&"))
    assert page.status_code == 200
    body = page.content.decode()
    delta = float(re.search(r'id="delta" data-value="([^"]+)"', body)[1])  # type: ignore[index]
    table = body.split('id="parts"')[1].split("</table>")[0]
    parts = [float(v) for v in re.findall(r'data-value="([^"]+)"', table)]
    assert len(parts) == len(PARTS)
    assert math.fsum(parts) == pytest.approx(delta, rel=1e-9, abs=1e-12)
    spend = body.split('id="spend-parts"')[1].split("</table>")[0]
    spend_delta = float(re.search(r'id="spend-delta" data-value="([^"]+)"', body)[1])  # type: ignore[index]
    spend_parts = [float(v) for v in re.findall(r'data-value="([^"]+)"', spend)]
    assert math.fsum(spend_parts) == pytest.approx(spend_delta, rel=1e-9)


def test_today_is_left_out_and_the_page_says_so(now: None) -> None:
    html = (
        client_as("finance")
        .get(
            "/economics/moved/",
            {"preset": "custom", "start": "2026-11-24", "end": "2026-12-01"},
        )
        .content.decode()
    )
    assert "today is in progress and is left out" in html
    # Six complete days against the six before them.
    assert "2026-11-24</strong> to <strong>2026-11-29" in html
    assert "2026-11-18 to 2026-11-23" in html


def test_a_sort_outside_the_columns_is_refused_naming_field_and_value(
    now: None,
) -> None:
    page = client_as("finance").get("/economics/moved/", WINDOW | {"sort": "cost;--"})
    assert page.status_code == 200
    assert "sort=&#x27;cost;--&#x27;: not a column" in page.content.decode()
    ordered = client_as("tech lead").get("/economics/moved/", WINDOW | {"sort": "name"})
    names = re.findall(r'data-name="([^"]+)"', ordered.content.decode())
    assert names == sorted(names, key=str) or len(set(names)) == len(names)


def test_the_page_needs_the_overview_right(now: None) -> None:
    assert client_as().get("/economics/moved/").status_code == 403
    assert client_as().get("/economics/moved/fleet/fleet/").status_code == 403
    assert (
        client_as("finance").get("/economics/moved/deployment/nope/").status_code == 404
    )


def test_the_api_gives_the_same_changes_as_the_page(now: None) -> None:
    html = client_as("finance").get("/economics/moved/", WINDOW).content.decode()
    rows = rows_of(html)
    secret = api_token_create(
        user=user_in("moved-api", "finance"), name="t", scopes=("api",),
        expires_at=END + timedelta(days=30),
    ).secret  # fmt: skip
    response = Client().get(
        "/api/v1/moved/",
        {"start": START.isoformat(), "end": STOP.isoformat(), "page_size": 1000},
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code == 200, response.content
    body = response.json()["results"]
    assert {(r["scope"], r["name"]) for r in body} == set(rows)
    for r in body:
        page = rows[(r["scope"], r["name"])]
        if r["change"] is None:
            assert math.isnan(page["change"])
            continue
        assert float(r["change"]) == pytest.approx(page["change"], rel=1e-12)
        for p in PARTS:
            if r[p] is not None:
                assert float(r[p]) == pytest.approx(page[p], rel=1e-9, abs=1e-12)
    bad = Client().get(
        "/api/v1/moved/", {"sort": "evil"}, HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert bad.status_code == 400
    assert "sort='evil'" in bad.content.decode()


def test_a_partial_day_counts_as_missing_and_never_as_a_finished_one(
    now: None,
) -> None:
    UnitCostFigure.objects.filter(
        scope="deployment", name="chat", grain="day",
        period_start=datetime(2026, 11, 29, tzinfo=UTC),
    ).update(complete=False)  # fmt: skip
    found = moved_read(start=START, end=STOP, scope="deployment", name="chat")
    row = found.rows.iloc[0]
    assert (row["days"], row["days_missing"], row["days_b"]) == (6, 1, 7)
    assert row["change"] == pytest.approx(
        direct_per_1k("deployment", "chat", START, date(2026, 11, 29))
        - direct_per_1k("deployment", "chat", START - timedelta(days=7), START),
        rel=1e-9,
    )


def test_a_team_filter_keeps_its_deployments_and_the_team_and_the_clock_part_shows(
    now: None,
) -> None:
    team = "assistant"
    members = set(Deployment.objects.filter(team=team).values_list("name", flat=True))
    found = moved_read(start=START, end=STOP, team=team)
    assert set(zip(found.rows["scope"], found.rows["name"], strict=True)) == {
        ("team", team),
        *(("deployment", n) for n in members),
    }
    # The demo's last week ends on estimated and provisional days, the week
    # before is billed: the two rest on different clocks.
    differ = found.rows[found.rows["clocks"] != found.rows["clocks_b"]]
    assert len(differ) and (differ["clock"].abs() > 0).all()
