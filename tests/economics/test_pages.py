"""The unit-economics pages as each role sees them."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth.models import Permission, User
from django.test import Client

from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import Budget, CostLine, UnitCostFigure
from tests.economics import world as w
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

STEP_DAY = 30
TODAY = datetime.combine(w.START + timedelta(w.DAYS), datetime.min.time(), UTC)


_users = itertools.count()


def client_as(*groups: str) -> Client:
    client = Client()
    client.force_login(user_in(f"user-{next(_users)}", *groups))
    return client


@pytest.fixture
def stepped(world: w.World) -> UnitCostFigure:
    """solo's bill jumps by half on one day at unchanged traffic and fleet."""
    CostLine.objects.bulk_create(
        [w.bill_line(STEP_DAY, "solo", Decimal("9.6"), usage_type="BoxUsage:extra")]
    )
    unit_costs_recompute(now=TODAY)
    return UnitCostFigure.objects.get(
        scope="deployment", name="solo", grain="day", period_start=w.day_start(STEP_DAY)
    )


def values(html: str, pattern: str) -> list[float]:
    return [float(v) for v in re.findall(pattern, html)]


def test_a_cost_step_at_unchanged_traffic_is_flagged_and_explained_by_its_price(
    stepped: UnitCostFigure,
) -> None:
    assert stepped.flag == "anomaly"
    assert stepped.parts["price"] > 0.9 * (
        stepped.cost_per_1k_requests - stepped.baseline
    )
    page = client_as("finance").get(f"/economics/explain/{stepped.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    parts = values(
        html, r'<tr data-part="\w+"><td>[^<]*</td><td class="num" data-value="([^"]+)"'
    )
    (total,) = values(html, r'id="parts-total" data-value="([^"]+)"')
    (delta,) = values(html, r'id="delta" data-value="([^"]+)"')
    assert len(parts) == 4
    assert sum(parts) == pytest.approx(total, abs=1e-12)
    # The parts sum to the change with no residual.
    assert total == pytest.approx(delta, rel=1e-9)
    assert delta == pytest.approx(stepped.cost_per_1k_requests - stepped.baseline)
    assert "$/GPU-hour" in html and "at unchanged traffic" in html


@time_machine.travel(TODAY + timedelta(hours=9), tick=False)
def test_the_overview_lists_every_flag_in_the_window_with_a_link_and_the_idle_dollars(
    stepped: UnitCostFigure,
) -> None:
    html = client_as("finance").get("/").content.decode()
    assert f'href="/economics/explain/{stepped.pk}/"' in html
    assert 'data-series="deployment/solo"' in html
    assert 'id="fleet-figures"' in html and 'id="idle-dollars"' in html
    # Pool idle: 120 of 192 GPU-hours of $614.40 a day, on the billed days.
    (idle,) = values(
        html, r'data-pool="p"[^>]*><td>p</td><td class="num" data-value="([^"]+)"'
    )
    billed_in_window = sum(
        1 for n in range(w.BILLED_DAYS) if w.day_start(n) >= TODAY - timedelta(90)
    )
    # Day 25 misses a's 05:00 hour: 2 more idle GPU-hours at $3.20.
    assert idle == pytest.approx(384.0 * billed_in_window + 6.4, rel=1e-9)
    narrow = client_as("finance").get(
        "/", {"start": (w.START + timedelta(STEP_DAY + 1)).isoformat()}
    )
    assert f"/economics/explain/{stepped.pk}/" not in narrow.content.decode()


def test_the_window_form_refuses_a_bad_date_by_field_and_value(world: w.World) -> None:
    html = client_as("finance").get("/", {"start": "2026-13-45"}).content.decode()
    assert "start=&#x27;2026-13-45&#x27;: is not a date (YYYY-MM-DD)" in html
    # ... and shows its default window instead, saying so, as every page does.
    default = client_as("finance").get("/").content.decode()
    assert "showing the default window" in html
    assert "(exclusive; last 90 days) for the whole fleet instead" in html
    assert _window_shown(html) == _window_shown(default)
    assert _body_shown(html) == _body_shown(default)  # the same figures
    year_9999 = client_as("finance").get("/economics/idle/", {"end": "9999-12-31"})
    assert (
        "end=&#x27;9999-12-31&#x27;: is outside the supported range "
        "2000-01-01..2100-12-31" in year_9999.content.decode()
    )
    html = (
        client_as("finance")
        .get("/", {"start": "2026-01-01", "end": "2026-03-01", "grain": "hour"})
        .content.decode()
    )
    assert "longer than 31 days" in html


def test_the_deployment_page_shows_its_band_its_flags_and_its_pool_idle(
    stepped: UnitCostFigure,
) -> None:
    lead = client_as("tech lead")
    with time_machine.travel(TODAY + timedelta(hours=9), tick=False):
        solo = lead.get("/fleet/solo/").content.decode()
        member = lead.get("/fleet/a/").content.decode()
    assert f'href="/economics/explain/{stepped.pk}/"' in solo
    assert 'data-figure-key="cost"' in solo  # $/1k with its band
    assert 'id="pool-idle"' in member and 'id="pool-idle"' not in solo


@time_machine.travel(TODAY + timedelta(hours=9), tick=False)
def test_finance_reads_sets_and_edits_budgets_and_a_user_without_the_right_cannot(
    stepped: UnitCostFigure,
) -> None:
    finance = client_as("finance")
    assert finance.get("/economics/budgets/").status_code == 200
    data = {"scope": "team", "name": "t1", "monthly_amount": "400", "currency": "usd"}
    assert client_as().post("/economics/budgets/", data).status_code == 403
    assert not Budget.objects.exists()
    assert finance.post("/economics/budgets/", data).status_code == 302
    assert Budget.objects.get().monthly_amount == Decimal("400")
    # Finance edits it (the same scope, name and currency: one budget).
    data["monthly_amount"] = "500"
    assert finance.post("/economics/budgets/", data).status_code == 302
    lead = client_as("tech lead")
    assert lead.post("/economics/budgets/", data).status_code == 302
    budget = Budget.objects.get()
    assert (budget.scope, budget.name, budget.currency) == ("team", "t1", "USD")
    assert budget.monthly_amount == Decimal("500")
    html = finance.get("/economics/budgets/").content.decode()
    assert 'data-budget="team/t1"' in html
    assert 'id="forecast-point"' in html
    # The page names the month it shows (the last with figures).
    assert "Budgets are monthly: shown for October 2026," in html
    # t1 spends about $19.20 a day (one day $28.80): $500 lasts 26 days or so.
    runs_out = re.search(r'data-col="runs-out">([^<]+)<', html).group(1)
    assert runs_out in {"2026-10-26", "2026-10-27"}, runs_out
    response = lead.post(
        "/economics/budgets/",
        {
            "scope": "team",
            "name": "nobody",
            "monthly_amount": "1e309",
            "currency": "US",
        },
    )
    assert response.status_code == 200, response.status_code
    refused = response.content.decode()
    assert "&#x27;nobody&#x27;" not in refused or "is not a team" in refused
    assert "&#x27;1e309&#x27; must be a positive amount" in refused
    assert "&#x27;US&#x27; is not a currency code" in refused
    assert Budget.objects.count() == 1


@time_machine.travel(TODAY + timedelta(hours=9), tick=False)
def test_adding_a_budget_is_not_the_right_to_edit_one(world: w.World) -> None:
    """The page writes by upsert; editing an existing budget needs
    change_budget, beside the add_budget that opens the form."""
    user = User.objects.create_user("adds-only")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_budget", "add_budget"])
    )
    client = Client()
    client.force_login(user)
    data = {"scope": "team", "name": "t1", "monthly_amount": "400", "currency": "USD"}
    assert client.post("/economics/budgets/", data).status_code == 302
    data["monthly_amount"] = "900"
    assert client.post("/economics/budgets/", data).status_code == 403
    assert Budget.objects.get().monthly_amount == Decimal("400")


def test_an_unknown_figure_is_a_404(world: w.World) -> None:
    assert client_as("finance").get("/economics/explain/999999/").status_code == 404


def _body_shown(html: str) -> str:
    """The page's main part without its refusals and per-request nonces."""
    main = html[html.index("<main") :]
    main = re.sub(r'<p class="error">.*?</p>', "", main)
    return re.sub(r' nonce="[^"]*"', "", main)


def _window_shown(html: str) -> str:
    """The days a page says it shows (``_filters.html``)."""
    found = re.search(
        r'id="window-shown" data-start="([^"]+)" data-end="([^"]+)"', html
    )
    assert found, "the page names no window"
    return f"{found[1]}..{found[2]}"
