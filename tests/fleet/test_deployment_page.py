"""The deployment page's telemetry views on a few hand-written rows: values
hand-computed, missing cells null, unmeasured series said so, not zeros."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from costapp.fleet.demo_setup import demo_fleet_load
from costapp.models import Deployment, DeploymentHour, DeviceHour, HistogramHour
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

DAY = datetime(2026, 3, 4, tzinfo=UTC)
H = timedelta(hours=1)
URL = "/fleet/code-assist/?start=2026-03-04&end=2026-03-05"


@pytest.fixture
def lead(client: Client) -> Client:
    client.force_login(user_in("lead", "tech lead", password="pw"))
    return client


def figures(client: Client, url: str = URL) -> dict[str, Any]:
    page = client.get(url)
    assert page.status_code == 200
    m = re.search(
        r'<script id="deployment-figures" type="application/json">(.*?)</script>',
        page.content.decode(),
        re.S,
    )
    assert m
    return json.loads(m.group(1))


def x_of(figure: dict[str, Any], t: dict[str, Any]) -> list[str]:
    return t.get("x", figure.get("x"))


@pytest.fixture
def rows() -> Deployment:
    demo_fleet_load()
    dep = Deployment.objects.get(name="code-assist")
    for h in range(4):
        DeploymentHour.objects.create(
            deployment=dep,
            hour=DAY + h * H,
            requests_stop=100,
            gpu_seconds=3600 * 3 / 7,
            preemptions=h,  # 0 in the first hour is a measured 0
            prefix_cache_queries=1000,
            prefix_cache_hits=250 * h,
        )  # KV-cache usage never reported: null
        for instance in ("1", "2"):
            if instance == "2" and h == 2:
                continue  # not scraped that hour: a blank cell
            DeviceHour.objects.create(
                deployment=dep,
                hostname="node-a",
                gpu_uuid="GPU-0",
                gpu_index=0,
                mig_profile="3g.40gb",
                gpu_instance_id=instance,
                hour=DAY + h * H,
                gr_engine_active_mean=0.1 * (h + 1) + (0.5 if instance == "2" else 0),
                dram_active_mean=0.05,
            )  # GPU_UTIL: absent on MIG
    bounds = [0.1, 0.5, 1.0, None]
    HistogramHour.objects.create(
        deployment=dep, hour=DAY, metric="ttft", bounds=bounds,
        cumulative_counts=[10, 10, 10, 10], total_sum=0.5, total_count=10,
    )  # fmt: skip
    HistogramHour.objects.create(
        deployment=dep, hour=DAY + H, metric="ttft", bounds=bounds,
        cumulative_counts=[0, 90, 90, 90], total_sum=27.0, total_count=90,
    )  # fmt: skip
    return dep


def test_the_heatmap_is_mig_instance_by_hour_with_blank_cells_for_gaps(
    lead: Client, rows: Deployment
) -> None:
    fig = figures(lead)["heatmap"]
    layers = {t["name"]: t for t in fig["data"]}
    assert set(layers) == {
        "GR engine active (DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
        "DRAM active (DCGM_FI_PROF_DRAM_ACTIVE)",
    }  # no GPU_UTIL layer: MIG instances do not report it
    gr = layers["GR engine active (DCGM_FI_PROF_GR_ENGINE_ACTIVE)"]
    assert gr["y"] == ["node-a GPU 0 MIG 3g.40gb #1", "node-a GPU 0 MIG 3g.40gb #2"]
    x = x_of(fig, gr)
    assert len(x) == 24 and x[0] == "2026-03-04 00:00"
    assert gr["z"][0][:5] == [0.1, 0.2, 0.3, 0.4, None]
    assert gr["z"][1][:4] == [0.6, 0.7, None, 0.9]  # hour 2 not scraped
    assert gr["visible"] is True
    assert layers["DRAM active (DCGM_FI_PROF_DRAM_ACTIVE)"]["visible"] is False
    assert [b["label"] for b in fig["layout"]["updatemenus"][0]["buttons"]] == [
        "GR engine active",
        "DRAM active",
    ]
    assert "GPU_UTIL not reported" in json.dumps(fig["layout"]["annotations"])


def test_latency_p95_is_from_the_summed_hour_buckets_with_slo_lines(
    lead: Client, rows: Deployment
) -> None:
    fig = figures(lead)["latency"]
    p95 = next(t for t in fig["data"] if t["name"] == "TTFT p95")
    # Each hour alone: hour 0 all in (0, 0.1]: rank 9.5 -> 0.095 s.
    assert p95["y"][0] == pytest.approx(95.0)
    # Hour 1: 90 in (0.1, 0.5]: rank 85.5 -> 0.1 + 0.4 * 85.5 / 90 = 0.48 s.
    assert p95["y"][1] == pytest.approx(480.0)
    assert p95["y"][2] is None  # no histogram: missing, not 0 ms
    assert "ms" in p95["hovertemplate"]
    notes = json.dumps(fig["layout"]["annotations"])
    assert "ITL histogram: not measured" in notes
    assert "E2E histogram: not measured" in notes
    assert "prefill vs decode: not measured" in notes
    slo = {s["yref"]: s["y0"] for s in fig["layout"]["shapes"]}
    assert slo == {"y": rows.slo_ttft_p95_ms, "y2": rows.slo_itl_p95_ms}


def test_kv_cache_says_not_measured_and_plots_the_rest(
    lead: Client, rows: Deployment
) -> None:
    fig = figures(lead)["kv"]
    names = [t["name"] for t in fig["data"]]
    assert names == ["preemptions", "prefix-cache hit rate"]
    assert "KV-cache usage: not measured" in json.dumps(fig["layout"]["annotations"])
    preemptions, hits = fig["data"]
    assert preemptions["y"][:5] == [0, 1, 2, 3, None]
    assert hits["y"][:5] == [0, 0.25, 0.5, 0.75, None]
    assert hits["hovertemplate"].startswith("%{y:.1%}")


def test_a_deployment_without_dcgm_rows_says_so_on_the_heatmap(
    lead: Client, rows: Deployment
) -> None:
    DeviceHour.objects.all().delete()
    fig = figures(lead)["heatmap"]
    assert fig["data"] == []
    assert "not measured" in fig["layout"]["annotations"][0]["text"]


def test_the_page_says_which_utc_days_it_shows_and_refuses_a_bad_range(
    lead: Client, rows: Deployment
) -> None:
    page = lead.get(URL).content.decode()
    assert "Showing UTC days <strong>2026-03-04</strong> to <strong>2026-03-04" in page
    assert "deployment_idle" not in page
    bad = lead.get("/fleet/code-assist/?start=2026-03-05&end=2026-03-04")
    assert bad.status_code == 200
    assert "must be after start" in bad.content.decode()


def test_the_cost_chart_marks_a_rate_card_change_and_the_first_hour_of_telemetry(
    lead: Client, rows: Deployment
) -> None:
    from datetime import date
    from decimal import Decimal

    from costapp.costs.rates import rate_key
    from costapp.models import RateCard

    key = rate_key(rows)
    RateCard.objects.create(
        gpu_type=key.gpu_type, instance_type=key.instance_type, region=key.region,
        gpus_per_unit=8, price=Decimal("20.00"), effective_from=date(2026, 3, 4),
        source="a contract starting that day", kind="contract",
    )  # fmt: skip
    # Another GPU's card, and one outside the window: not marks.
    RateCard.objects.create(
        gpu_type="L4", price=Decimal("1"), effective_from=date(2026, 3, 4), source="x"
    )
    RateCard.objects.create(
        gpu_type=key.gpu_type, instance_type=key.instance_type, region=key.region,
        gpus_per_unit=8, price=Decimal("21"), effective_from=date(2026, 1, 1),
        source="older",
    )  # fmt: skip
    layout = figures(lead)["cost"]["layout"]
    marks = [a for a in layout["annotations"] if a.get("name") == "mark"]
    assert [(m["x"], m["text"]) for m in marks] == [
        ("2026-03-04", "first hour of telemetry"),
        ("2026-03-04", f"rate card: $2.5000/GPU-h contract, {key.instance_type}"),
    ]
    assert sum(1 for s in layout["shapes"] if s["x0"] == "2026-03-04") == 2
