from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Sum
from django.test import Client

from costapp.economics.selectors import (
    deployment_days_frame,
    deployment_days_read,
    overview_read,
)
from costapp.fleet.demo_setup import demo_user_ensure
from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    IngestRun,
    Pool,
    RateCard,
    UnitCostFigure,
)
from costapp.sources.demo import DemoEvents, DemoSource
from costapp.telemetry.selectors import latency_daily_percentiles
from tests.support.demo_data import demo_for_module, demo_load, demo_tables_wipe

END = datetime(2026, 11, 30, tzinfo=UTC)  # a Monday
DAYS = 35  # covers the holiday, the scrape gap and the incident
EVENTS = DemoEvents.for_end(END)

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[IngestRun]:
    """One demo load shared by the read-only tests of this module."""
    with demo_for_module(django_db_blocker, end=END, days=DAYS) as run:
        yield run


def _dump() -> dict[str, list[tuple]]:
    """Every demo table, minus what records a run (which run wrote, when)."""
    skip = {"id", "run_id", "fetched_at", "created_at", "updated_at"}
    out = {}
    for model in (
        CostLine,
        DeploymentHour,
        DeviceHour,
        HistogramHour,
        EngineDiscovery,
        Deployment,
        Pool,
        RateCard,
    ):
        columns = [
            f.column for f in model._meta.concrete_fields if f.column not in skip
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(columns)} FROM {model._meta.db_table} "
                f"ORDER BY {', '.join(columns)}"
            )
            out[model._meta.db_table] = [tuple(map(str, row)) for row in cursor]
    return out


def test_loading_the_demo_twice_leaves_identical_rows() -> None:
    demo_tables_wipe()
    first = demo_load(end=END, days=8)
    assert first.status == IngestRun.SUCCEEDED, first.error
    before = _dump()
    second = demo_load(end=END, days=8)
    assert second.status == IngestRun.SUCCEEDED, second.error
    assert _dump() == before
    assert sum(len(rows) for rows in before.values()) > 10_000


def test_the_generator_is_deterministic_and_reads_no_clock() -> None:
    a = DemoSource(seed=3, days=2, end=END)
    b = DemoSource(seed=3, days=2, end=END + timedelta(hours=5))  # same UTC day
    assert [x.records for x in a.fetch(a.window)] == [
        x.records for x in b.fetch(b.window)
    ]
    c = DemoSource(seed=4, days=2, end=END)
    assert [x.records for x in a.fetch(a.window)] != [
        x.records for x in c.fetch(c.window)
    ]


def _chat_days() -> dict[date, dict]:
    frame = deployment_days_frame(
        deployment_days_read(
            start=(END - timedelta(days=DAYS)).date(),
            end=END.date(),
            deployments=["chat"],
        )
    )
    return {row["day"]: row for row in frame.to_dict("records")}


def test_the_incident_raises_chats_cost_per_1k_by_about_40_percent(
    demo: IngestRun,
) -> None:
    days = _chat_days()
    first_full = (EVENTS.incident_start + timedelta(days=1)).date()
    last_full = (EVENTS.incident_end - timedelta(days=1)).date()
    assert (last_full - first_full).days >= 1
    day = first_full
    while day <= last_full:
        now, before = days[day], days[day - timedelta(days=7)]
        assert now["requests"] == pytest.approx(before["requests"], rel=0.10)
        ratio = now["cost_per_1k_requests"] / before["cost_per_1k_requests"]
        assert 1.25 < ratio < 1.6, (day, ratio)
        assert now["gpu_hours"] / before["gpu_hours"] == pytest.approx(ratio, rel=0.1)
        day += timedelta(days=1)


def test_the_incident_worsens_inter_token_latency(demo: IngestRun) -> None:
    chat = Deployment.objects.get(name="chat")
    itl = latency_daily_percentiles(
        chat, start=(END - timedelta(days=DAYS)).date(), end=END.date(), metric="itl"
    )
    inside = (EVENTS.incident_start + timedelta(days=1)).date()
    assert itl[inside][1] > 1.15 * itl[inside - timedelta(days=7)][1]


def test_the_holiday_dips_traffic_and_raises_unit_cost(demo: IngestRun) -> None:
    days = _chat_days()
    holiday, normal = days[EVENTS.holiday], days[EVENTS.holiday - timedelta(days=7)]
    assert holiday["requests"] < 0.6 * normal["requests"]
    assert holiday["cost_per_1k_requests"] > 1.1 * normal["cost_per_1k_requests"]


def test_the_scrape_gap_leaves_hours_without_rows_and_the_jump_after_it(
    demo: IngestRun,
) -> None:
    chat = Deployment.objects.get(name="chat")
    hours = dict(
        DeploymentHour.objects.filter(
            deployment=chat,
            hour__gte=EVENTS.gap_start - timedelta(hours=2),
            hour__lte=EVENTS.gap_end + timedelta(hours=1),
        ).values_list("hour", "requests_stop")
    )
    gap = EVENTS.gap_start
    while gap < EVENTS.gap_end:
        assert gap not in hours
        gap += timedelta(hours=1)
    # The counters kept counting during the gap: the first hour after it
    # carries the jump.
    after = hours[EVENTS.gap_end]
    assert after > 3 * hours[EVENTS.gap_start - timedelta(hours=1)]


def test_pods_restart_and_mig_rows_follow_dcgm(demo: IngestRun) -> None:
    mig = DeviceHour.objects.filter(deployment__name="code-assist")
    assert mig.exists()
    assert not mig.exclude(gpu_util_mean=None).exists()
    row = mig.first()
    assert row is not None
    sibling = DeviceHour.objects.filter(
        hostname=row.hostname, gpu_uuid=row.gpu_uuid, hour=row.hour
    ).exclude(gpu_instance_id=row.gpu_instance_id)
    # MIG instances on one GPU repeat the parent's power.
    assert {s.power_w_mean for s in sibling} <= {row.power_w_mean}
    hour = DeploymentHour.objects.filter(deployment__name="code-assist").first()
    assert hour is not None
    assert hour.gpu_seconds == pytest.approx(
        hour.replicas_mean * 3600 * 3 / 7, rel=0.02
    )


def test_bills_come_through_the_cost_explorer_parser(demo: IngestRun) -> None:
    lines = CostLine.objects.filter(source="demo")
    assert lines.filter(tag_key="costapp:workload", tag_value="p5-chat").exists()
    assert lines.filter(estimated=True).values("period_start").distinct().count() == 2
    fee = lines.get(record_type="fee")
    assert fee.period_start.day == 1 and fee.unblended_cost > 0
    assert fee.amortized_cost == 0
    assert lines.filter(record_type="credit", amortized_cost__lt=0).exists()
    # The pool's bill is whole nodes at the list price; the provisional cost
    # (measured GPU-hours) is at most that: the rest is idle or unscraped.
    day = (END - timedelta(days=3)).replace(tzinfo=UTC)
    bill = lines.get(
        period_start=day,
        service="Amazon Elastic Compute Cloud - Compute",
        tag_value="p5-chat",
    )
    assert bill.unblended_cost == bill.usage_quantity * Decimal("55.04")
    provisional = next(
        r.cost
        for r in deployment_days_read(
            start=day.date(), end=day.date() + timedelta(days=1)
        )
        if r.deployment == "chat"
    )
    assert provisional is not None
    assert Decimal("0.8") * bill.unblended_cost < provisional <= bill.unblended_cost


def test_the_overview_reads_kpis_and_a_row_per_deployment(demo: IngestRun) -> None:
    data = overview_read(today=END.date(), days=DAYS)
    assert data.kpis[0].label == "Spend, last 7 days"
    assert {s.name for s in data.deployments} == {
        "chat",
        "classify",
        "code-assist",
        "moderation",
        "summarize",
    }
    chat = next(s for s in data.deployments if s.name == "chat")
    assert chat.cost_7d > 0 and 0 < chat.truncation_share < 0.1
    assert data.basis == {"billed", "provisional"}  # the newest day has no bill yet


def test_the_demo_user_is_a_tech_lead_and_in_finance() -> None:
    credentials = demo_user_ensure()
    assert credentials.password
    user = User.objects.get(username="demo")
    assert user.check_password(credentials.password)
    assert set(user.groups.values_list("name", flat=True)) >= {"tech lead", "finance"}
    assert demo_user_ensure().password is None  # reused, password kept


def test_what_the_demo_runs_today_is_what_the_capacity_engine_predicts(
    demo: IngestRun,
) -> None:
    """The what-if page starts from the demo's discovered configuration: its KV
    pool must agree with the engine, and every deployment must meet its SLA
    today, or the page would open on a contradiction."""
    from costapp.capacity import whatif as capacity
    from costapp.capacity.selectors import deployment_today

    for deployment in Deployment.objects.order_by("name"):
        today = deployment_today(deployment)
        result = capacity.whatif(today, []).columns[0].result
        assert result is not None, deployment.name
        observed = int(deployment.discovery.cache_config["num_gpu_blocks"])
        assert result.num_gpu_blocks == pytest.approx(observed, rel=0.05), (
            deployment.name
        )
        assert result.max_requests_per_s_within_sla > 0, (
            deployment.name,
            result.reason,
        )


def test_the_deployment_page_prices_computed_prompt_tokens_and_the_cache(
    demo: IngestRun, client: Client
) -> None:
    """The demo's vLLM 0.10 has no prompt-source split: the page works from
    its prefix-cache hits, says so, and its figures are the stored hours'
    sums and the cost card's cost, recomputed here by hand."""
    start, end = END - timedelta(days=7), END
    demo_user_ensure()
    client.force_login(User.objects.get(username="demo"))
    page = client.get(
        f"/fleet/chat/?start={start:%Y-%m-%d}&end={end:%Y-%m-%d}"
    ).content.decode()
    card = page[page.index('id="prompt-tokens"') :]
    assert "prefix-cache hits (this engine does not split" in card
    hours = DeploymentHour.objects.filter(
        deployment__name="chat", hour__gte=start, hour__lt=end
    ).aggregate(prompt=Sum("prompt_tokens"), hits=Sum("prefix_cache_hits"))
    seconds = dict(
        HistogramHour.objects.filter(
            deployment__name="chat",
            hour__gte=start,
            hour__lt=end,
            metric__in=("ttft", "e2e"),
        )
        .values_list("metric")
        .annotate(s=Sum("total_sum"))
    )
    cost = float(
        UnitCostFigure.objects.filter(
            scope="deployment",
            name="chat",
            grain="day",
            period_start__gte=start,
            period_start__lt=end,
        ).aggregate(c=Sum("cost"))["c"]
    )
    share = seconds["ttft"] / seconds["e2e"]
    computed = hours["prompt"] - hours["hits"]
    per_1m, saved = (
        float(re.search(rf'id="prompt-{key}" data-value="([^"]+)"', card)[1])  # type: ignore[index]
        for key in ("per-1m", "saved")
    )
    assert per_1m == pytest.approx(cost * share / computed * 1e6, rel=1e-9)
    assert saved == pytest.approx(cost * share / computed * hours["hits"], rel=1e-9)
    assert 0 < saved < cost * share
    assert "time to first token (queue + prefill)" in card


def test_the_incident_explanation_shows_how_chat_served_beside_the_week_before(
    demo: IngestRun, client: Client
) -> None:
    """On-call opens a flagged incident day and sees, beside the cost parts,
    the same day's latency against the 7 days before: the figures of the
    stored hours, with units."""
    from costapp.telemetry.selectors import serving_health_read

    day = EVENTS.incident_start + timedelta(days=1)
    day = day.replace(hour=0, minute=0, second=0, microsecond=0)
    figure = UnitCostFigure.objects.get(
        scope="deployment", name="chat", grain="day", period_start=day
    )
    demo_user_ensure()
    client.force_login(User.objects.get(username="demo"))
    page = client.get(f"/economics/explain/{figure.pk}/").content.decode()
    table = page[
        page.index('id="serving"') : page.index("</table>", page.index('id="serving"'))
    ]
    chat = Deployment.objects.get(name="chat")
    now = serving_health_read(chat, start=day, end=day + timedelta(days=1))
    before = serving_health_read(chat, start=day - timedelta(days=7), end=day)
    assert now.itl_p95_s and before.itl_p95_s and now.itl_p95_s > before.itl_p95_s
    row = re.search(r'data-serving="itl">(.*?)</tr>', table, re.S)[1]  # type: ignore[index]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[1] == f"{now.itl_p95_s * 1000:,.0f} ms"
    assert cells[2] == f"{before.itl_p95_s * 1000:,.0f} ms"
    assert cells[3] == "p95 at most 60 ms"
    assert 'data-serving="preemptions"' in table and 'data-serving="kv_mean"' in table
