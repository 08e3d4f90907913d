"""90 days of the demo fleet through the telemetry and deployment pages:
every plotted value against raw SQL over the stored rows, no trace over 2,000
points, the telemetry page's 90-day HTML under 1 MB, missing cells null."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.urls import reverse

from analytics.histograms import Buckets, bucket_quantile
from tests.support.demo_data import demo_for_module
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.integration, pytest.mark.long]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 90
START = END - timedelta(days=DAYS)
WINDOW = f"start={START.date()}&end={END.date()}"


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=END, days=DAYS):
        yield


@pytest.fixture
def lead(client: Client, demo: None) -> Iterator[Client]:
    client.force_login(user_in("lead", "tech lead", password="pw"))
    with time_machine.travel(END + timedelta(hours=9), tick=False):
        yield client


def figures(page: str, script: str) -> dict[str, Any]:
    m = re.search(
        rf'<script id="{script}" type="application/json">(.*?)</script>', page, re.S
    )
    assert m, f"no {script} on the page"
    return json.loads(m.group(1))


def traces(figure: dict[str, Any]) -> list[dict[str, Any]]:
    """As charts.js draws them: a shared time axis handed to each trace."""
    return [{**t, "x": t.get("x", figure.get("x"))} for t in figure["data"]]


def trace(figure: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in traces(figure) if t["name"] == name)


def sql(query: str, params: dict[str, Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def stamp(start: datetime, bucket: int, width_h: int) -> str:
    return (start + timedelta(hours=bucket * width_h)).strftime("%Y-%m-%d %H:%M")


def width_hours(figure: dict[str, Any]) -> int:
    x = traces(figure)[0]["x"]
    a, b = (datetime.strptime(v, "%Y-%m-%d %H:%M") for v in x[:2])
    return int((b - a) / timedelta(hours=1))


BUCKET = "floor(extract(epoch from (h.hour - %(start)s)) / (3600 * %(w)s))::int"


def test_the_90_day_telemetry_page_is_under_1_mb_with_every_trace_within_2000(
    lead: Client,
) -> None:
    sizes = {}
    for name in ("chat", "code-assist", "moderation"):
        response = lead.get(f"/telemetry/{name}/?{WINDOW}")
        assert response.status_code == 200
        sizes[name] = len(response.content)
        page = response.content.decode()
        assert "Showing UTC days <strong>2026-09-01</strong>" in page
        for key, figure in figures(page, "telemetry-figures").items():
            for t in traces(figure):
                assert len(t["x"]) <= 2000, (name, key, t["name"])
                if t.get("legendgroup"):  # a shaded band: one stretch of it
                    assert 1 < len(t["x"]) <= 1080, (name, key, t["name"])
                else:
                    assert len(t["x"]) == 1080  # 90 days of 2-hour points
    assert max(sizes.values()) < 1_000_000, sizes
    # The table: a row per UTC day, not a row per hour.
    page = lead.get(f"/telemetry/chat/?{WINDOW}").content.decode()
    table = page[page.index('id="hours"') : page.index('id="devices"')]
    assert table.count("<tr>") == 1 + DAYS


def test_the_telemetry_page_plots_the_stored_sums_per_two_hours(lead: Client) -> None:
    page = lead.get(f"/telemetry/chat/?{WINDOW}").content.decode()
    fig = figures(page, "telemetry-figures")["traffic"]
    w = width_hours(fig)
    assert w == 2
    rows = sql(
        f"SELECT {BUCKET}, SUM(h.requests_stop), SUM(h.gpu_seconds) / 3600 "
        "FROM costapp_deploymenthour h JOIN costapp_deployment d "
        "ON d.id = h.deployment_id WHERE d.name = 'chat' "
        "AND h.hour >= %(start)s AND h.hour < %(end)s GROUP BY 1",
        {"start": START, "end": END, "w": w},
    )
    expected = {b: (stop, gpu) for b, stop, gpu in rows}
    stop = trace(fig, "stop")
    gpu = trace(fig, "GPU-hours")
    for i, x in enumerate(stop["x"]):
        assert x == stamp(START, i, w)
        if i in expected:
            assert stop["y"][i] == pytest.approx(expected[i][0], rel=1e-6)
            assert gpu["y"][i] == pytest.approx(expected[i][1], rel=1e-6)
        else:  # the scrape gap: no rows, so no bar (not a 0)
            assert stop["y"][i] is None and gpu["y"][i] is None
    assert len(expected) < len(stop["x"])  # the gap is in the window


def test_the_heatmap_cells_are_the_stored_means_and_blank_where_not_measured(
    lead: Client,
) -> None:
    for name in ("chat", "code-assist"):
        page = lead.get(f"/fleet/{name}/?start={START.date()}&end={END.date()}")
        fig = figures(page.content.decode(), "deployment-figures")["heatmap"]
        w = width_hours(fig)
        rows = sql(
            "SELECT h.hostname || ' GPU ' || h.gpu_index || CASE WHEN "
            "h.mig_profile <> '' THEN ' MIG ' || h.mig_profile || ' #' || "
            f"h.gpu_instance_id ELSE '' END, {BUCKET}, AVG(h.gr_engine_active_mean), "
            "AVG(h.dram_active_mean), AVG(h.gpu_util_mean) / 100 "
            "FROM costapp_devicehour h JOIN costapp_deployment d "
            "ON d.id = h.deployment_id WHERE d.name = %(name)s "
            "AND h.hour >= %(start)s AND h.hour < %(end)s GROUP BY 1, 2",
            {"start": START, "end": END, "w": w, "name": name},
        )
        cells = {(r[0], r[1]): r[2:] for r in rows}
        layers = {t["name"].split(" (")[0]: t for t in traces(fig)}
        columns = [
            ("GR engine active", 0),
            ("DRAM active", 1),
            *([("GPU_UTIL", 2)] if name == "chat" else []),
        ]
        assert set(layers) == {c for c, _ in columns}  # MIG: no GPU_UTIL layer
        blank = 0
        for layer, k in columns:
            t = layers[layer]
            assert len(t["x"]) <= 2000 and len(t["x"]) * len(t["y"]) <= 24_000
            assert {device for device, _ in cells} == set(t["y"])
            for r, device in enumerate(t["y"]):
                for c, value in enumerate(t["z"][r]):
                    want = cells.get((device, c), (None, None, None))[k]
                    if want is None:
                        assert value is None, (name, layer, device, c)
                        blank += 1
                    else:
                        assert value == pytest.approx(float(want), rel=1e-6)
        assert blank > 0  # devices come and go with the autoscaler; the gap


def _summed_buckets(name: str, metric: str, w: int) -> dict[int, Buckets]:
    """Bucket counts summed element-wise by PostgreSQL over each bucket's hours."""
    rows = sql(
        f"SELECT {BUCKET}, i, SUM((h.cumulative_counts->>i)::float), "
        "MIN(h.bounds::text) FROM costapp_histogramhour h JOIN costapp_deployment d "
        "ON d.id = h.deployment_id, generate_series(0, "
        "jsonb_array_length(h.cumulative_counts::jsonb) - 1) i "
        "WHERE d.name = %(name)s AND h.metric = %(metric)s AND h.hour >= %(start)s "
        "AND h.hour < %(end)s GROUP BY 1, 2 ORDER BY 1, 2",
        {"start": START, "end": END, "w": w, "name": name, "metric": metric},
    )
    counts: dict[int, list[float]] = {}
    bounds: dict[int, tuple] = {}
    for bucket, _, total, text in rows:
        counts.setdefault(bucket, []).append(total)
        bounds[bucket] = tuple(json.loads(text))
    return {b: Buckets(bounds[b], tuple(c)) for b, c in counts.items()}


def test_latency_percentiles_come_from_the_buckets_summed_in_sql(lead: Client) -> None:
    page = lead.get(f"/fleet/chat/?start={START.date()}&end={END.date()}")
    fig = figures(page.content.decode(), "deployment-figures")["latency"]
    w = width_hours(fig)
    for metric, label, scale in (("ttft", "TTFT", 1000), ("itl", "ITL", 1000),
                                 ("e2e", "E2E", 1)):  # fmt: skip
        summed = _summed_buckets("chat", metric, w)
        p95 = trace(fig, f"{label} p95")
        assert len(p95["x"]) <= 2000
        for i, value in enumerate(p95["y"]):
            if i not in summed or summed[i].count <= 0:
                assert value is None
                continue
            want = bucket_quantile(0.95, summed[i])
            assert value == pytest.approx(want * scale, rel=1e-6), (metric, i)
    # TTFT and ITL p95 sit on panels of their own, each with its SLO line.
    assert trace(fig, "TTFT p95")["yaxis"] != trace(fig, "ITL p95")["yaxis"]
    slo = {s["yref"]: s["y0"] for s in fig["layout"]["shapes"]}
    (ttft_slo, itl_slo) = sql(
        "SELECT slo_ttft_p95_ms, slo_itl_p95_ms FROM costapp_deployment "
        "WHERE name = 'chat'",
        {},
    )[0]
    assert slo == {"y": ttft_slo, "y2": itl_slo}
    assert "histograms not measured" in json.dumps(fig["layout"]["annotations"])


def test_kv_cache_panels_are_the_stored_gauges_sums_and_ratio_of_sums(
    lead: Client,
) -> None:
    page = lead.get(f"/fleet/code-assist/?start={START.date()}&end={END.date()}")
    fig = figures(page.content.decode(), "deployment-figures")["kv"]
    w = width_hours(fig)
    rows = sql(
        f"SELECT {BUCKET}, AVG(h.kv_cache_usage_mean), MAX(h.kv_cache_usage_max), "
        "SUM(h.preemptions), SUM(h.prefix_cache_hits) / "
        "NULLIF(SUM(h.prefix_cache_queries), 0) FROM costapp_deploymenthour h "
        "JOIN costapp_deployment d ON d.id = h.deployment_id "
        "WHERE d.name = 'code-assist' AND h.hour >= %(start)s AND h.hour < %(end)s "
        "GROUP BY 1",
        {"start": START, "end": END, "w": w},
    )
    expected = {r[0]: r[1:] for r in rows}
    names = ("KV usage mean", "KV usage max", "preemptions", "prefix-cache hit rate")
    plotted = [trace(fig, n) for n in names]
    for i in range(len(plotted[0]["x"])):
        want = expected.get(i)
        for k, t in enumerate(plotted):
            if want is None or want[k] is None:
                assert t["y"][i] is None
            else:
                assert t["y"][i] == pytest.approx(float(want[k]), rel=1e-6)


def test_every_deployment_trace_is_within_2000_points_over_three_years(
    lead: Client,
) -> None:
    start = END - timedelta(days=3 * 366)
    page = lead.get(f"/fleet/chat/?start={start.date()}&end={END.date()}")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"Showing UTC days <strong>{start.date()}</strong>" in html
    for key, figure in figures(html, "deployment-figures").items():
        for t in traces(figure):
            assert len(t.get("x") or []) <= 2000, (key, t["name"])


def test_the_cost_view_marks_estimated_and_provisional_days_and_links_flags(
    lead: Client,
) -> None:
    page = lead.get(f"/fleet/chat/?start={START.date()}&end={END.date()}")
    html = page.content.decode()
    fig = figures(html, "deployment-figures")["cost"]
    clocks = sql(
        "SELECT to_char(period_start AT TIME ZONE 'UTC', 'YYYY-MM-DD'), clock, flag, "
        "id, cost_per_1k_requests FROM costapp_unitcostfigure WHERE scope = "
        "'deployment' AND name = 'chat' AND grain = 'day' AND period_start >= "
        "%(start)s AND period_start < %(end)s ORDER BY period_start",
        {"start": START, "end": END},
    )
    actual = trace(fig, "$ per 1k requests")
    assert actual["x"] == [c[0] for c in clocks]
    for y, row in zip(actual["y"], clocks, strict=True):
        assert (y is None) == (row[4] is None)
        if y is not None:
            assert y == pytest.approx(row[4], rel=1e-6)
    estimated = [c[0] for c in clocks if c[1] == "estimated"]
    provisional = [c[0] for c in clocks if c[1] == "provisional"]
    assert estimated and provisional
    assert trace(fig, "estimated bill")["x"] == estimated
    assert trace(fig, "provisional (rate card, no bill yet)")["x"] == provisional
    assert ", ".join(estimated) in html
    flagged = [c for c in clocks if c[2]]
    assert flagged, "the demo's incident is flagged"
    marks = trace(fig, "flagged (click: why)")
    assert marks["meta"] == {"links": True}
    assert marks["customdata"] == [
        reverse("economics:explanation", args=[c[3]]) for c in flagged
    ]
    for url in marks["customdata"]:
        assert url in html  # the flagged-days table links the same
    money = [t["hovertemplate"] for t in traces(fig) if t["name"].startswith("$")]
    assert all("$%{y:,.3f}" in h for h in money)


def test_hourly_charts_draw_in_the_display_time_zone(
    lead: Client, settings: Any
) -> None:
    settings.DISPLAY_TIME_ZONE = "America/New_York"
    page = lead.get(f"/telemetry/chat/?{WINDOW}").content.decode()
    fig = figures(page, "telemetry-figures")["traffic"]
    x = traces(fig)[0]["x"]
    assert x[0] == "2026-08-31 20:00"  # 2026-09-01 00:00 UTC, EDT
    assert x[-1] == "2026-11-29 17:00"  # 22:00 UTC, EST after the change
    assert "time (America/New_York)" in json.dumps(fig["layout"]["xaxis"])
    assert "Showing UTC days" in page
