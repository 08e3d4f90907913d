from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from costapp.capacity import selectors
from costapp.models import Deployment

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_today_is_prefilled_from_fleet_discovery_and_the_peak_hour(
    chat: Deployment,
) -> None:
    today = selectors.deployment_today(chat)
    s = today.settings
    assert s["model"].value == "Llama-3.1-8B"
    assert (s["gpu"].value, s["tp"].value) == ("H100-SXM", 1)
    assert s["block_size"] == selectors.Setting(16, "discovered")
    assert s["gpu_memory_utilization"] == selectors.Setting(0.9, "discovered")
    assert s["kv_dtype"] == selectors.Setting("auto", "discovered")
    assert today.observed_blocks == 27000
    # Peak hour: 7.75 req/s, 800 prompt and 200 output tokens per request.
    assert today.traffic is not None
    assert today.traffic.requests_per_s == pytest.approx(7.75)
    assert s["prompt_tokens"] == selectors.Setting(800, "observed")
    assert s["output_tokens"] == selectors.Setting(200, "observed")
    assert s["itl_sla_ms"] == selectors.Setting(60.0, "fleet")
    assert s["ttft_sla_ms"].origin == "default"
    assert today.price is not None and today.price.per_gpu_hour == Decimal("6.88")
    assert today.scenario is not None and today.scenario.gpu_hour_price == 6.88


def test_a_deployment_without_hours_uses_labelled_defaults(chat: Deployment) -> None:
    chat.deploymenthour_set.all().delete()
    today = selectors.deployment_today(chat)
    assert today.traffic is None
    assert today.settings["prompt_tokens"].origin == "default"
    assert today.settings["target_requests_per_s"].value is None


def test_the_page_shows_today_and_variants_with_deltas_and_calibration(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/chat/",
        {
            "a-kv_dtype": "fp8",
            "a-max_model_len": "8192",
            "b-gpu": "H200",
            "c-mig_profile": "3g.40gb",
        },
    )
    assert response.status_code == 200
    html = response.content.decode()
    columns = response.context["columns"]
    assert [c.label for c in columns] == [
        "Today",
        "Variant A",
        "Variant B",
        "Variant C",
    ]
    # fp8 halves KV bytes per token: delta shown against today.
    kv_row = next(
        cells
        for m, cells in response.context["whatif"].rows
        if m.field == "kv_bytes_per_token"
    )
    assert kv_row[0].text == "128.0 KiB"
    assert kv_row[1].text == "64.0 KiB" and kv_row[1].delta.startswith("-64.0 (-50%)")
    assert kv_row[1].tone == "good"
    assert "roofline, uncalibrated" in html
    assert "$0.2466/1k req" in html
    assert 'id="chart-throughput"' in html and 'id="chart-memory"' in html
    assert "num_gpu_blocks=27,000" in html


def test_bad_input_names_the_field_and_value_without_a_500(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/chat/",
        {
            "a-max_model_len": "lots",
            "b-gpu_memory_utilization": "1.7",
            "c-engine_version": "latest",
            "c-tp": "3",
        },
    )
    assert response.status_code == 200
    errors = response.context["errors"]
    text = " ".join(errors)
    assert "max_model_len" in text and "'lots'" in text
    assert "gpu_memory_utilization" in text and "'1.7'" in text
    assert "engine_version" in text and "'latest'" in text
    assert "tp" in text and "'3'" in text
    assert [c.label for c in response.context["columns"]] == ["Today"]


def test_engine_refusals_are_shown_on_the_column(
    chat: Deployment, browser_client: Client
) -> None:
    # TP across MIG instances is impossible; the engine says so.
    response = browser_client.get(
        "/capacity/chat/", {"a-mig_profile": "3g.40gb", "a-tp": "2"}
    )
    assert response.status_code == 200
    assert any("tp" in e and "MIG" in e for e in response.context["errors"])


def test_simulate_reports_ttft_and_itl_percentiles(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get("/capacity/chat/", {"simulate": "today"})
    assert response.status_code == 200
    sim = response.context["simulation"]
    assert sim is not None and sim.result.requests_completed > 100
    assert sim.result.ttft_p95_ms >= sim.result.ttft_p50_ms > 0
    assert b"TTFT" in response.content


def test_an_unknown_deployment_is_a_404(browser_client: Client) -> None:
    assert browser_client.get("/capacity/nope/").status_code == 404


@pytest.mark.smoke
def test_every_demo_model_maps_to_a_catalogue_entry() -> None:
    import yaml

    from costapp.capacity.adapters import catalogue_model_name

    fleet = yaml.safe_load(open("costapp/fleet/demo_fleet.yaml"))
    for entry in fleet["deployments"]:
        assert catalogue_model_name(entry["model"])  # raises when unknown


def test_each_column_names_its_limit_and_a_refused_one_draws_no_curve(
    chat: Deployment, browser_client: Client
) -> None:
    # B: a pool too small for the model's maximum, which vLLM refuses to start.
    response = browser_client.get(
        "/capacity/chat/",
        {"a-max_num_seqs": "4", "b-gpu_memory_utilization": "0.3"},
    )
    assert response.status_code == 200
    limits = {c.key: text for c, text in response.context["binding"]}
    assert limits["a"].startswith("max_num_seqs")
    assert limits["b"] == "vLLM refuses to start: see Runs?"
    assert limits["today"] and limits["today"] != limits["a"]
    assert 'id="binding-row"' in response.content.decode()
    columns = {c.key: c for c in response.context["columns"]}
    assert not columns["b"].result.starts
    drawn = {c.label for c in response.context["curves"]}
    assert "Variant B" not in drawn and "Today" in drawn


def test_every_price_says_its_rate_card_and_an_unconfirmed_one_is_marked(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get("/capacity/chat/", {"b-gpu": "H200"})
    assert response.status_code == 200
    today, variant_b = response.context["prices"]
    assert today.text == "$6.8800/GPU-h" and not today.unconfirmed
    assert today.basis == "list, p5.48xlarge, from 2025-06-01"
    assert variant_b.unconfirmed and "Capacity Blocks" in variant_b.source
    html = response.content.decode()
    assert 'id="price-row"' in html and "unconfirmed</span>" in html


def test_today_takes_the_fleets_serving_arguments_where_the_engine_is_silent(
    chat: Deployment,
) -> None:
    chat.serving_args = {"max_model_len": 8192, "block_size": 32, "max_num_seqs": 64}
    chat.save()
    today = selectors.deployment_today(chat)
    s = today.settings
    # cache_config_info never carries max_model_len: the fleet file's stands.
    assert s["max_model_len"] == selectors.Setting(8192, "fleet")
    assert s["max_num_seqs"] == selectors.Setting(64, "fleet")
    assert today.scenario is not None and today.scenario.max_model_len == 8192
    # The engine reports block_size 16: it wins, and the page says so.
    assert s["block_size"] == selectors.Setting(16, "discovered")
    assert any(
        "declares block_size=32, the engine reports 16" in p for p in today.problems
    )
