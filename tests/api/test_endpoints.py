"""Every endpoint read with a token, its figures checked against SQL over the
raw rows (bill lines, telemetry hours, stored figures), never through the
selectors the API reads."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.db import connection

from costapp.models import AlertEvent, AlertRule, AlertState, Budget, UnitCostFigure
from tests.api.conftest import NOW, TokenFor
from tests.api.helpers import all_rows, api_get
from tests.economics import world as w

pytestmark = pytest.mark.django_db

WINDOW = {
    "start": w.START.isoformat(),
    "end": (w.START + timedelta(days=w.DAYS)).isoformat(),
}


def sql(query: str, *params: Any) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall())


def dec(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def as_float_text(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(repr(value))


def test_unit_costs_are_the_stored_rows_and_sum_to_sql(
    world: w.World, token_for: TokenFor
) -> None:
    token = token_for("finance")
    rows = all_rows("/api/v1/unit-costs/", token, scope="deployment", **WINDOW)
    stored = sql(
        "SELECT name, period_start, cost, cost_per_1k_requests, cost_per_1m_tokens, "
        "requests, currency FROM costapp_unitcostfigure WHERE scope = 'deployment' "
        "AND grain = 'day' AND period_start >= %s AND period_start < %s",
        w.day_start(0),
        w.day_start(w.DAYS),
    )
    assert len(rows) == len(stored) == 3 * w.DAYS
    by_key = {(r["name"], r["period_start"]): r for r in rows}
    for name, start, cost, per_1k, per_1m, requests, currency in stored:
        got = by_key[(name, start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))]
        assert dec(got["cost"]) == cost
        assert dec(got["cost_per_1k_requests"]) == as_float_text(per_1k)
        assert dec(got["cost_per_1m_tokens"]) == as_float_text(per_1m)
        assert got["requests"] == requests
        assert got["currency"] == currency == "USD"
    # The column's total, exact at stored precision.
    (total,) = sql(
        "SELECT SUM(cost) FROM costapp_unitcostfigure WHERE scope = 'deployment' "
        "AND grain = 'day' AND period_start >= %s AND period_start < %s",
        w.day_start(0),
        w.day_start(w.DAYS),
    )[0]
    assert sum(dec(r["cost"]) or Decimal(0) for r in rows) == total
    # By hand: solo's billed day is its tagged line, $19.20.
    solo0 = by_key[("solo", "2026-09-07T00:00:00Z")]
    assert solo0["cost"] == "19.200000000000" and solo0["clock"] == "final"
    # Day 10: solo finished no request, so there is no unit cost (null, not 0).
    solo10 = by_key[
        ("solo", (w.day_start(w.ZERO_REQUEST_DAY)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    ]
    assert solo10["cost_per_1k_requests"] is None


def test_one_series_at_the_hour_grain(world: w.World, token_for: TokenFor) -> None:
    token = token_for("finance")
    rows = all_rows(
        "/api/v1/unit-costs/", token, scope="deployment", name="solo", grain="hour",
        start="2026-10-10", end="2026-10-12",
    )  # fmt: skip
    (count, total) = sql(
        "SELECT COUNT(*), SUM(cost) FROM costapp_unitcostfigure WHERE scope = "
        "'deployment' AND name = 'solo' AND grain = 'hour' AND period_start >= %s "
        "AND period_start < %s",
        datetime(2026, 10, 10, tzinfo=UTC),
        datetime(2026, 10, 12, tzinfo=UTC),
    )[0]
    assert len(rows) == count == 48
    assert sum(dec(r["cost"]) or Decimal(0) for r in rows) == total
    assert {r["clock"] for r in rows} == {"provisional"}  # days 33, 34: no bill


@pytest.mark.parametrize("grain", ["week", "month"])
@pytest.mark.parametrize("path", ["/api/v1/unit-costs/", "/api/v1/baselines/"])
def test_week_and_month_figures_are_served_like_days(
    world: w.World, token_for: TokenFor, path: str, grain: str
) -> None:
    """Every stored grain has a window bound (schemathesis found month without
    one answering 500)."""
    token = token_for("finance")
    rows = all_rows(
        path, token, scope="deployment", name="solo", grain=grain,
        start="2026-09-01", end="2026-11-01",
    )  # fmt: skip
    (count,) = sql(
        "SELECT COUNT(*) FROM costapp_unitcostfigure WHERE scope = 'deployment' "
        "AND name = 'solo' AND grain = %s AND period_start >= %s AND period_start < %s",
        grain,
        datetime(2026, 9, 1, tzinfo=UTC),
        datetime(2026, 11, 1, tzinfo=UTC),
    )[0]
    assert count > 0 and len(rows) == count


def test_baselines_carry_the_band_with_the_figure(
    world: w.World, token_for: TokenFor
) -> None:
    token = token_for("finance")
    rows = all_rows("/api/v1/baselines/", token, scope="team", **WINDOW)
    stored = sql(
        "SELECT name, period_start, cost_per_1k_requests, baseline, lower, upper, flag "
        "FROM costapp_unitcostfigure WHERE scope = 'team' AND grain = 'day' "
        "AND period_start >= %s AND period_start < %s",
        w.day_start(0),
        w.day_start(w.DAYS),
    )
    assert len(rows) == len(stored)
    by_key = {(r["name"], r["period_start"][:10]): r for r in rows}
    banded = 0
    for name, start, figure, baseline, lower, upper, flag in stored:
        got = by_key[(name, start.astimezone(UTC).date().isoformat())]
        assert dec(got["cost_per_1k_requests"]) == as_float_text(figure)
        assert dec(got["baseline"]) == as_float_text(baseline)
        assert dec(got["lower"]) == as_float_text(lower)
        assert dec(got["upper"]) == as_float_text(upper)
        assert got["flag"] == flag
        banded += baseline is not None
    assert banded > 20  # the band exists once the baseline is warm


def test_spend_reconciles_to_the_bill_lines_each_day(
    world: w.World, token_for: TokenFor
) -> None:
    token = token_for("finance")
    rows = all_rows("/api/v1/spend/", token, **WINDOW)
    bills = dict(
        sql(
            "SELECT (period_start AT TIME ZONE 'UTC')::date, SUM(amortized_cost) "
            "FROM costapp_costline GROUP BY 1"
        )
    )
    assert len(bills) == w.BILLED_DAYS
    per_day: dict[date, Decimal] = {}
    for r in rows:
        if r["bill"] is not None:
            day = date.fromisoformat(r["day"])
            per_day[day] = per_day.get(day, Decimal(0)) + Decimal(r["bill"])
    assert per_day == bills  # deployments + pool idle + unallocated = the bill
    solo_lines = dict(
        sql(
            "SELECT (period_start AT TIME ZONE 'UTC')::date, SUM(amortized_cost) "
            "FROM costapp_costline WHERE tag_value = 'solo' GROUP BY 1"
        )
    )
    by_key = {(r["deployment"], r["pool"], r["day"]): r for r in rows}
    for day, amount in solo_lines.items():
        assert Decimal(by_key[("solo", "", day.isoformat())]["bill"]) == amount
    # Pool p split by measured GPU-hours (SQL over the telemetry hours).
    day0 = w.START.isoformat()
    seconds = dict(
        sql(
            "SELECT d.name, SUM(h.gpu_seconds) FROM costapp_deploymenthour h JOIN "
            "costapp_deployment d ON d.id = h.deployment_id WHERE h.hour >= %s AND "
            "h.hour < %s GROUP BY d.name",
            w.day_start(0),
            w.day_start(1),
        )
    )
    node_seconds = Decimal(8 * 24 * 3600)
    for name in ("a", "b"):
        share = w.POOL_DAY_BILL * Decimal(repr(seconds[name])) / node_seconds
        # A pool member's row names its pool, as the CSV export does.
        assert Decimal(by_key[(name, "p", day0)]["bill"]) == share
    assert by_key[("__idle__", "p", day0)]["bill"] == "384.000000000000"  # 120/192
    # The estimated day says so; the days after the bill are provisional only.
    estimated = (w.START + timedelta(days=w.ESTIMATED_DAY)).isoformat()
    assert by_key[("solo", "", estimated)]["status"] == "estimated"
    late = (w.START + timedelta(days=w.BILLED_DAYS)).isoformat()
    solo_late = by_key[("solo", "", late)]
    assert solo_late["status"] == "provisional" and solo_late["bill"] is None
    (gpu_seconds,) = sql(
        "SELECT SUM(h.gpu_seconds) FROM costapp_deploymenthour h JOIN "
        "costapp_deployment d ON d.id = h.deployment_id WHERE d.name = 'solo' AND "
        "h.hour >= %s AND h.hour < %s",
        w.day_start(w.BILLED_DAYS),
        w.day_start(w.BILLED_DAYS + 1),
    )[0]
    rate = Decimal("0.944")
    assert Decimal(solo_late["provisional"]) == Decimal(repr(gpu_seconds)) / 3600 * rate
    assert solo_late["currency"] == "USD"
    # One deployment only.
    only_b = all_rows("/api/v1/spend/", token, deployment="b", **WINDOW)
    assert {r["deployment"] for r in only_b} == {"b"} and len(only_b) == w.DAYS


def test_idle_is_the_stored_pool_idle(world: w.World, token_for: TokenFor) -> None:
    token = token_for("finance")
    rows = all_rows("/api/v1/idle/", token, **WINDOW)
    stored = dict(
        sql(
            "SELECT period_start, idle_cost FROM costapp_unitcostfigure WHERE "
            "scope = 'pool' AND name = 'p' AND grain = 'day'"
        )
    )
    assert len(rows) == len(stored) == w.DAYS
    for r in rows:
        start = datetime.fromisoformat(r["period_start"].replace("Z", "+00:00"))
        assert dec(r["idle_cost"]) == stored[start]
        assert r["pool"] == "p" and r["currency"] == "USD"
    billed = [r for r in rows if r["idle_cost"] is not None]
    assert len(billed) == w.BILLED_DAYS
    # By hand: 120 of the pool's 192 GPU-hours a day are idle (x $614.40); on
    # the day a's late hour is missing, 122.
    late = (w.START + timedelta(days=w.LATE_DAY)).isoformat()
    for r in billed:
        want = (
            "390.400000000000" if r["period_start"][:10] == late else "384.000000000000"
        )
        assert r["idle_cost"] == want, r


def test_budgets_show_the_amount_and_the_spend_to_date(
    world: w.World, token_for: TokenFor
) -> None:
    Budget.objects.create(
        scope="fleet", name="fleet", monthly_amount=Decimal("25000.5")
    )
    token = token_for("finance")
    with time_machine.travel(NOW, tick=False):
        rows = all_rows("/api/v1/budgets/", token)
    assert len(rows) == 1
    (amount,) = sql("SELECT monthly_amount FROM costapp_budget")[0]
    row = rows[0]
    assert Decimal(row["monthly_amount"]) == amount and row["currency"] == "USD"
    assert row["month"] == "2026-10-01"
    (spent,) = sql(
        "SELECT SUM(cost) FROM costapp_unitcostfigure WHERE scope = 'fleet' AND "
        "grain = 'day' AND period_start >= %s AND period_start <= %s",
        datetime(2026, 10, 1, tzinfo=UTC),
        datetime.fromisoformat(row["as_of"]).replace(tzinfo=UTC),
    )[0]
    assert float(row["spent_to_date"]) == pytest.approx(float(spent), rel=1e-12)
    assert row["spent_share"] == pytest.approx(float(spent) / 25000.5, rel=1e-12)
    # A forecast is an estimate: fixed point to the cent, as money reads.
    for key in ("forecast", "forecast_lower", "forecast_upper"):
        assert row[key] is None or re.fullmatch(r"-?[0-9]+\.[0-9]{2}", row[key]), key


def alerts_seed() -> None:
    rule = AlertRule.objects.create(
        name="unit cost up", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    figure = UnitCostFigure.objects.filter(
        scope="deployment", name="solo", grain="day"
    ).first()
    assert figure is not None
    for i, kind in enumerate(("firing", "repeat", "resolved")):
        AlertEvent.objects.create(
            rule=rule, scope_name="solo", kind=kind,
            data_time=w.day_start(20 + i), value=2.5 + i, baseline=2.0,
            figure_id=figure.pk, created_at=w.day_start(21 + i),
        )  # fmt: skip
    AlertState.objects.create(
        rule=rule, scope_name="solo", state="firing", since=w.day_start(20)
    )
    AlertState.objects.create(rule=rule, scope_name="a", state="inactive")


def test_alerts_are_a_tech_leads_and_finance_gets_403(
    world: w.World, token_for: TokenFor
) -> None:
    alerts_seed()
    lead, finance = token_for("tech lead"), token_for("finance")
    events = all_rows("/api/v1/alerts/events/", lead, **WINDOW)
    stored = sql(
        "SELECT kind, value, data_time FROM costapp_alertevent ORDER BY data_time DESC"
    )
    assert [(e["kind"], dec(e["value"])) for e in events] == [
        (kind, as_float_text(value)) for kind, value, _ in stored
    ]
    assert {e["currency"] for e in events} == {"USD"} and events[0][
        "rule"
    ] == "unit cost up"
    fired = all_rows("/api/v1/alerts/events/", lead, kind="firing", **WINDOW)
    assert [e["kind"] for e in fired] == ["firing"]
    active = all_rows("/api/v1/alerts/active/", lead)
    assert [(a["scope_name"], a["state"]) for a in active] == [("solo", "firing")]
    for path in ("/api/v1/alerts/events/", "/api/v1/alerts/active/"):
        refused = api_get(path, finance)
        assert refused.status_code == 403, path
        assert "role" in refused.json()["detail"]
    # The same finance token reads what finance may.
    assert api_get("/api/v1/unit-costs/", finance).status_code == 200


def test_a_user_without_a_role_gets_403_everywhere(
    world: w.World, token_for: TokenFor
) -> None:
    token = token_for()  # in no group
    for path in (
        "unit-costs",
        "baselines",
        "spend",
        "idle",
        "moved",
        "overview",
        "budgets",
        "alerts/events",
        "alerts/active",
        "schema",
    ):
        assert api_get(f"/api/v1/{path}/", token).status_code == 403, path


@pytest.mark.parametrize(
    ("path", "params", "field", "quoted"),
    [
        ("unit-costs", {"start": "2026-13-01"}, "start", "start='2026-13-01'"),
        ("unit-costs", {"scope": "galaxy"}, "scope", "scope='galaxy'"),
        ("unit-costs", {"name": "a\x00b"}, "name", "name='a\\x00b'"),
        (
            "unit-costs",
            {"grain": "hour", "start": "2026-01-01", "end": "2026-03-01"},
            "end",
            "at most 31",
        ),
        (
            "unit-costs",
            {"start": "2026-10-01", "end": "2026-09-01"},
            "end",
            "must be after",
        ),
        ("unit-costs", {"start": "1999-12-31"}, "start", "start='1999-12-31'"),
        ("spend", {"start": "2026-01-01", "end": "2026-12-01"}, "end", "at most 93"),
        ("spend", {"basis": "blended"}, "basis", "basis='blended'"),
        ("idle", {"page_size": "5000"}, "page_size", "page_size='5000'"),
        ("idle", {"page": "0"}, "page", "page='0'"),
        ("idle", {"page": "1e3"}, "page", "page='1e3'"),
        ("budgets", {"limit": "10"}, "limit", "'limit'"),
        # strptime's %Y reads full-width digits.
        (
            "unit-costs",
            {"start": "\uff12\uff10\uff12\uff16-01-01"},
            "start",
            "is not a date (YYYY-MM-DD)",
        ),
        ("unit-costs", {"grain": "year"}, "grain", "grain='year'"),
        ("unit-costs", {"end": "9999-01-01"}, "end", "end='9999-01-01'"),
        # The same words as a page's.
        (
            "unit-costs",
            {"end": "9999-01-01"},
            "end",
            "end='9999-01-01': is outside the supported range 2000-01-01..2100-12-31",
        ),
        ("unit-costs", {"start": "2026-W48-1"}, "start", "is not a date (YYYY-MM-DD)"),
        ("idle", {"page_size": "9" * 30}, "page_size", "page_size='999"),
        ("alerts/events", {"kind": "bogus"}, "kind", "kind='bogus'"),
        # An empty value is not "left out": the schema says a date.
        ("unit-costs", {"start": ""}, "start", "start='': empty"),
        ("spend", {"deployment": ""}, "deployment", "deployment='': empty"),
        # Read as sent, as the schema's patterns say: DRF would trim "chat "
        # to "chat", and Python's $ takes "USD\n".
        ("unit-costs", {"name": "chat "}, "name", "name='chat '"),
        ("unit-costs", {"currency": "USD\n"}, "currency", "currency='USD\\n'"),
        ("unit-costs", {"start": " 2026-11-01"}, "start", "is not a date (YYYY-MM-DD)"),
        ("idle", {"page": "2 "}, "page", "page='2 ': is not an integer"),
        # A stored name holds no control character: none can match.
        ("alerts/events", {"rule": "a\tb"}, "rule", "rule='a\\tb'"),
        ("alerts/events", {"scope_name": "a\u202eb"}, "scope_name", "scope_name="),
        # A rule that falls on a parameter left out says so, not "end=None".
        ("unit-costs", {"start": "2000-01-01"}, "end", "end (default): the window"),
    ],
)
def test_bad_query_parameters_are_refused_by_name(
    token_for: TokenFor, path: str, params: dict[str, str], field: str, quoted: str
) -> None:
    response = api_get(f"/api/v1/{path}/", token_for("tech lead"), **params)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors and any(quoted in m for m in errors[field]), errors


def test_pages_are_bounded_and_a_page_past_the_end_is_empty(
    world: w.World, token_for: TokenFor
) -> None:
    token = token_for("finance")
    (count,) = sql(
        "SELECT COUNT(*) FROM costapp_unitcostfigure WHERE scope = 'deployment' AND grain = 'day'"
    )[0]
    seen, page = [], 1
    while True:
        body = api_get(
            "/api/v1/unit-costs/", token, page=page, page_size=7, **WINDOW
        ).json()
        assert len(body["results"]) <= 7
        seen.extend((r["name"], r["period_start"]) for r in body["results"])
        if body["next"] is None:
            break
        page += 1
    assert len(seen) == len(set(seen)) == count
    past = api_get("/api/v1/unit-costs/", token, page=999, **WINDOW).json()
    assert past["results"] == [] and past["count"] == count
    default = api_get("/api/v1/unit-costs/", token, **WINDOW).json()
    assert default["page_size"] == 100 and len(default["results"]) == 100


def test_an_alert_event_without_a_value_is_null_not_zero(token_for: TokenFor) -> None:
    from costapp.models import AlertEvent, AlertRule

    rule = AlertRule.objects.create(
        name="stale", metric="staleness", grain="hour", threshold=6.0
    )
    AlertEvent.objects.create(
        rule=rule, scope_name="prometheus", kind="resolved", reason="stale",
        data_time=datetime(2026, 11, 2, tzinfo=UTC), value=None, baseline=None,
        created_at=datetime(2026, 11, 2, tzinfo=UTC),
    )  # fmt: skip
    rows = all_rows(
        "/api/v1/alerts/events/", token_for("tech lead"),
        start="2026-11-01", end="2026-11-03",
    )  # fmt: skip
    assert [(r["value"], r["baseline"]) for r in rows] == [(None, None)]
