"""The shared filter (costapp/filters.py): presets, team and deployments in the
URL; the readers take ``team=``/``deployments=`` and the figures change with
them, checked against SQL sums over the stored bill lines."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import Sum
from django.http import QueryDict
from django.test import Client

from costapp.costs.allocations import bill_total_read, reconciliation_rows_read
from costapp.costs.breakdown import breakdown_read
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.filters import filters_read
from costapp.formatting import money
from costapp.models import CostLine
from tests.costs.conftest import utc
from tests.costs.test_exports import NOV, seed_month
from tests.support.users import user_in

pytestmark = pytest.mark.django_db
DEC = date(2026, 12, 1)
NOW = utc(2026, 12, 10, 12)


def sql_sum(**where: object) -> Decimal:
    total = CostLine.objects.filter(**where).aggregate(t=Sum("amortized_cost"))["t"]
    assert total is not None
    return Decimal(total)


@pytest.fixture
def month() -> None:
    seed_month(days=30, billed_days=29)


def lead() -> Client:
    """Logged in under the test's clock (sessions end after 12 h idle)."""
    c = Client()
    c.force_login(user_in("lead", "tech lead"))
    return c


def test_a_team_keeps_only_its_deployments_share_of_the_bill(month: None) -> None:
    whole = breakdown_read(start=NOV, end=DEC, basis="amortized")
    search = breakdown_read(start=NOV, end=DEC, basis="amortized", team="search")
    # embed (team search) is allocated the tagged g6 lines, nothing else.
    embed_lines = sql_sum(tag_value="embed")
    assert search.totals == {"USD": embed_lines}
    assert search.totals != whole.totals
    by_deployment = {s.name: s.amount for s in search.dimensions["deployment"]}
    assert by_deployment == {"embed": embed_lines}
    assert {s.name: s.amount for s in search.dimensions["usage_type"]} == {
        "BoxUsage:g6.xlarge": embed_lines
    }
    assert search.idle == [] and search.unallocated == []
    assert search.scoped and not whole.scoped
    assert bill_total_read(NOV, DEC, "amortized", team="search") == {"USD": embed_lines}


def test_the_pool_members_and_the_idle_add_up_to_the_pool_lines(month: None) -> None:
    members = breakdown_read(
        start=NOV, end=DEC, basis="amortized", deployments=["chat", "code"]
    )
    whole = breakdown_read(start=NOV, end=DEC, basis="amortized")
    (idle,) = whole.idle
    pool_lines = sql_sum(usage_type="BoxUsage:p5.48xlarge")
    assert members.totals["USD"] + idle.amount == pool_lines
    assert {s.name for s in members.dimensions["team"]} == {
        "assistant",
        '=HYPERLINK("http://x")',
    }
    rows = reconciliation_rows_read(NOV, DEC, "amortized", deployments=["embed"])
    assert rows and {r.deployment for r in rows} == {"embed"}
    assert sum(r.billed for r in rows if r.billed is not None) == sql_sum(
        tag_value="embed"
    )


@time_machine.travel(NOW, tick=False)
def test_the_filters_live_in_the_url_and_change_the_page(month: None) -> None:
    client = lead()
    whole = client.get("/costs/breakdown/", {"preset": "last_month"}).content.decode()
    page = client.get(
        "/costs/breakdown/", {"preset": "last_month", "team": "search"}
    ).content.decode()
    embed = money(sql_sum(tag_value="embed"), "USD")
    total = money(sql_sum(), "USD")
    assert total in whole and "bill allocated to team search" in page
    assert embed in page and total not in page
    assert 'id="scope-shown">team search<' in page
    # The preset links keep the team (and the form shows it chosen).
    links = re.findall(r'href="(\?preset=[^"]+)"', page)
    assert links and all("team=search" in link for link in links)
    assert '<option value="search" selected>' in page
    bills = client.get(
        "/costs/", {"preset": "last_month", "deployment": "embed"}
    ).content.decode()
    assert f'data-kpi="selected-USD">{embed}<' in bills
    assert f'data-kpi="bill-USD">{total}<' in bills


@time_machine.travel(NOW, tick=False)
@pytest.mark.parametrize(
    ("query", "said"),
    [
        ({"team": "nope"}, "team=&#x27;nope&#x27;: "),
        ({"deployment": "zzz"}, "deployment=&#x27;zzz&#x27;: &#x27;zzz&#x27; is not"),
        ({"preset": "5y"}, "preset=&#x27;5y&#x27;: not a preset"),
        ({"start": "2026-11-01", "end": "2031-01-01"}, "longer than 1098 days"),
    ],
)
def test_an_unknown_value_is_refused_by_field_and_value(
    month: None, query: dict[str, str], said: str
) -> None:
    client = lead()
    for url in ("/costs/", "/costs/breakdown/", "/costs/reconciliation/", "/"):
        page = client.get(url, query)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert said in text, (url, text[:200])
        if url != "/" or "start" not in query:
            # (the overview refuses a bad day through its own window form)
            assert "for the whole fleet instead" in text, url


@time_machine.travel(NOW, tick=False)
def test_the_presets_are_utc_days_and_each_page_says_its_window(month: None) -> None:
    client = lead()
    f = filters_read(QueryDict("preset=7d&team=search"))
    assert (f.start, f.end, f.team, f.deployments) == (
        date(2026, 12, 3),
        date(2026, 12, 10),
        "search",
        ("embed",),
    )
    assert "preset=custom&start=2026-12-03&end=2026-12-10&team=search" == f.query
    for url in (
        "/",
        "/economics/budgets/",
        "/costs/",
        "/costs/breakdown/",
        "/costs/reconciliation/",
        "/alerts/log/",
    ):
        text = client.get(url, {"preset": "last_month"}).content.decode()
        assert "Showing UTC days <strong>2026-11-01</strong> to <strong>2026-11-30" in (
            text
        ), url


@time_machine.travel(NOW, tick=False)
def test_the_overview_table_keeps_the_chosen_deployments(month: None) -> None:
    # The overview reads the stored figures that the recompute after each
    # ingest writes.
    unit_costs_recompute(now=NOW)
    client = lead()
    query = {"preset": "last_month"}
    whole = client.get("/", query).content.decode()
    one = client.get("/", {**query, "deployment": ["chat", "embed"]}).content.decode()
    rows = re.compile(r'<tr data-deployment="([^"]+)"')
    assert set(rows.findall(whole)) == {"chat", "code", "embed"}
    assert set(rows.findall(one)) == {"chat", "embed"}
    assert "deployments chat, embed" in one
    # A team alone keeps the overview's own default window, and says so.
    default = client.get("/", {"team": "assistant"}).content.decode()
    assert (
        "<strong>2026-09-11</strong> to <strong>2026-12-09</strong> (last 90 days"
        in (default)
    )
    team = client.get("/", {**query, "team": "assistant"}).content.decode()
    assert set(rows.findall(team)) == {"chat"}
    # The window runs to 2026-12-01 (exclusive): the table's last 7 days are
    # Nov 24-30, chat's 7 x 24 x 31 finished requests.
    (requests,) = re.findall(
        r'data-deployment="chat">.*?data-col="requests" data-value="([^"]+)"',
        team,
        re.S,
    )
    assert float(requests) == 7 * 24 * 31
    assert date(2026, 12, 1) - timedelta(days=7) == date(2026, 11, 24)


@time_machine.travel(NOW, tick=False)
def test_an_export_refuses_a_team_rather_than_dropping_it(month: None) -> None:
    client = lead()
    for url in ("/costs/export.csv", "/costs/export.zip", "/costs/export-summary.csv"):
        response = client.get(url, {"month": "2026-11", "team": "search"})
        assert response.status_code == 400, url
        assert response.content.decode().startswith("team='search': an export covers")
    whole = client.get("/costs/export.csv", {"month": "2026-11"})
    assert whole.status_code == 200
