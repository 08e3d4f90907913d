from __future__ import annotations

import csv
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from analytics.errors import InvalidInput
from costapp.capacity import adapters, services
from costapp.formatting import MISSING
from costapp.models import Calibration, Deployment, Scenario
from tests.capacity.conftest import FIXTURES

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_mig_comparison_lists_valid_layouts_and_refuses_an_invalid_one_with_the_reason(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/mig/",
        {
            "gpu": "H100-SXM",
            "deployments": ["chat"],
            "layouts": "7g\n4g+3g\n3g+2g+2g\n7x1g\n3g+3g+1g\n4g+4g",
        },
    )
    assert response.status_code == 200, response.context.get("errors")
    rows = {r.layout: r for r in response.context["rows"]}
    assert rows["7g.80gb"].valid and rows["4g.40gb + 3g.40gb"].valid
    # A run of one profile is written once ("7x1g" is 7x1g.10gb, not seven names).
    assert rows["3g.40gb + 2x2g.20gb"].valid
    assert rows["7x1g.10gb"].valid
    assert not rows["2x4g.40gb"].valid
    assert "8 compute slices" in rows["2x4g.40gb"].reason
    assert not rows["2x3g.40gb + 1g.10gb"].valid
    assert "9 memory slices" in rows["2x3g.40gb + 1g.10gb"].reason
    # Seven instances refused for one reason are one line naming all seven.
    (refused,) = rows["7x1g.10gb"].instances
    assert refused.startswith(", ".join(f"1g.10gb@{i}" for i in range(7)) + ": ")
    assert rows["7g.80gb"].cost_per_1k_requests.startswith("$")
    assert b"refused" in response.content


def test_mig_page_names_an_unknown_profile_and_its_value(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/mig/",
        {
            "gpu": "H100-SXM",
            "deployments": ["chat"],
            "layouts": "5g+2g",
        },
    )
    assert response.status_code == 200
    assert any("layouts" in e and "'5g'" in e for e in response.context["errors"])


def test_search_ranks_configurations_by_cost_and_lists_the_infeasible(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/search/",
        {
            "deployment": "chat",
            "objective": "cost_per_1k_requests",
            "space_kv_dtype": "auto, fp8",
            "space_max_num_seqs": "8, 64, 256",
            "space_gpu_memory_utilization": "0.5, 0.9",
            "space_mig_profile": "none, 3g.40gb, 1g.10gb",
        },
    )
    assert response.status_code == 200, response.context.get("errors")
    ranked = response.context["ranked"]
    costs = [float(r["cost_per_1k_requests"].lstrip("$")) for r in ranked]
    assert len(costs) > 3 and costs == sorted(costs)
    assert response.context["infeasible"], "1g.10gb cannot hold the weights"
    assert any(
        "memory" in r["reason"] or "KV" in r["reason"]
        for r in response.context["infeasible"]
    )
    assert 'id="chart-pareto"' in response.content.decode()
    # Integers read as typed (the frame holds them as floats), units in the cell.
    assert any("max_num_seqs=64," in r["config"] for r in ranked)
    assert not any(".0," in r["config"] for r in ranked)
    assert ranked[0]["p95_latency_s"].endswith(" s")
    assert ranked[0]["itl_ms"].endswith(" ms")


def test_a_search_figure_that_is_missing_has_no_unit() -> None:
    import pandas as pd

    from costapp.capacity.tables import search_rows
    from costapp.formatting import MISSING

    (row,) = search_rows(
        pd.DataFrame([{"max_num_seqs": 64.0, "p95_latency_s": float("nan")}]),
        ["max_num_seqs"],
        10,
    )
    assert row["config"] == "max_num_seqs=64"
    assert row["p95_latency_s"] == MISSING and row["itl_ms"] == MISSING


def test_search_offers_the_seed_weighted_objective_and_refuses_a_bad_choice(
    chat: Deployment, browser_client: Client
) -> None:
    ok = browser_client.get(
        "/capacity/search/",
        {
            "deployment": "chat",
            "objective": "seed_weighted",
            "space_kv_dtype": "auto, fp8",
        },
    )
    assert ok.status_code == 200 and ok.context["ranked"]
    bad = browser_client.get(
        "/capacity/search/",
        {
            "deployment": "chat",
            "objective": "cost_per_1k_requests",
            "space_max_num_seqs": "8, many",
        },
    )
    assert bad.status_code == 200
    assert any("'many'" in e for e in bad.context["errors"])


def test_a_malformed_calibration_file_is_refused_naming_the_field_and_nothing_is_stored(
    db, browser_client: Client
) -> None:
    upload = SimpleUploadedFile(
        "bad.json", (FIXTURES / "calibration_negative_bandwidth.json").read_bytes()
    )
    response = browser_client.post("/capacity/calibrations/", {"file": upload})
    assert response.status_code == 200
    text = " ".join(response.context["errors"])
    assert "params.bw_eff_bytes_per_s" in text and "-3" in text
    assert Calibration.objects.count() == 0


def test_a_file_that_is_not_json_is_refused(db, browser_client: Client) -> None:
    upload = SimpleUploadedFile("x.json", b"{not json")
    response = browser_client.post("/capacity/calibrations/", {"file": upload})
    assert response.status_code == 200
    assert "not valid JSON" in " ".join(response.context["errors"])
    assert Calibration.objects.count() == 0


def test_a_vllm_bench_serve_result_imports_and_then_labels_predictions(
    chat: Deployment, browser_client: Client
) -> None:
    upload = SimpleUploadedFile(
        "bench.json", (FIXTURES / "vllm_bench_serve_qwen3_vl_8b_1qps.json").read_bytes()
    )
    response = browser_client.post(
        "/capacity/calibrations/",
        {
            "file": upload,
            "gpu": "H100-SXM",
            "model": "Llama-3.1-8B",
            "weight_dtype": "bf16",
            "kv_dtype": "auto",
            "tp": "1",
            "engine_version": "0.10.1",
        },
    )
    assert response.status_code == 302, response.context and response.context["errors"]
    row = Calibration.objects.get()
    assert (row.kind, row.gpu_type, row.model_name) == (
        "engine_bench",
        "H100-SXM",
        "Llama-3.1-8B",
    )
    assert row.fit_error is not None
    assert adapters.engine_calibration(row).fit.n_points == 1
    listing = browser_client.get("/capacity/calibrations/")
    assert b"bench.json" in listing.content
    page = browser_client.get("/capacity/chat/")
    today = page.context["columns"][0]
    assert today.result.calibration.kind == "engine_measurements"
    assert "roofline" not in today.calibration_label


def test_a_bench_latency_file_needs_the_batch_shape(db) -> None:
    content = (
        FIXTURES.parent.parent
        / "analytics"
        / "capacity"
        / "fixtures"
        / "vllm_bench_latency_format.json"
    ).read_bytes()
    with pytest.raises(InvalidInput) as refused:
        services.calibration_import(
            content=content, target={"gpu": "H100-SXM", "model": "Llama-3.1-8B"}
        )
    assert refused.value.field == "batch_size"
    row = services.calibration_import(
        content=content,
        target={
            "gpu": "H100-SXM",
            "model": "Llama-3.1-8B",
            "batch_size": 8,
            "input_len": 512,
            "output_len": 128,
        },
    )
    assert row.kind == "engine_bench" and row.fit_error is not None


def test_a_saved_scenario_is_listed_shared_by_link_and_exported_as_csv(
    chat: Deployment, browser_client: Client
) -> None:
    query = "a-kv_dtype=fp8&a-max_model_len=8192"
    response = browser_client.post(
        "/capacity/chat/save", {"name": "fp8 KV", "query": query}
    )
    assert response.status_code == 302
    saved = Scenario.objects.get()
    assert response["Location"] == f"/capacity/s/{saved.share_token}/"
    assert saved.inputs["columns"][1]["overrides"] == {
        "kv_dtype": "fp8",
        "max_model_len": 8192,
    }
    listing = browser_client.get("/capacity/scenarios/")
    assert b"fp8 KV" in listing.content
    shared = browser_client.get(f"/capacity/s/{saved.share_token}/")
    assert shared.status_code == 200 and b"64.0 KiB" in shared.content
    exported = browser_client.get(f"/capacity/s/{saved.share_token}/csv")
    assert exported["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [r["column"] for r in rows] == ["Today", "Variant A"]
    assert rows[1]["kv_dtype"] == "fp8" and rows[1]["max_model_len"] == "8192"
    assert float(rows[1]["kv_bytes_per_token"]) == 65536.0
    assert rows[0]["currency"] == "USD" and float(rows[0]["cost_per_1k_requests"]) > 0


def test_the_share_link_still_requires_a_login(
    chat: Deployment, client: Client
) -> None:
    saved = Scenario.objects.create(name="x", inputs={}, result={})
    response = client.get(f"/capacity/s/{saved.share_token}/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_saving_a_bad_comparison_stores_nothing(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.post(
        "/capacity/chat/save",
        {"name": "bad", "query": "a-max_model_len=lots"},
        follow=True,
    )
    assert response.status_code == 200
    assert Scenario.objects.count() == 0
    assert "&#x27;lots&#x27;" in response.content.decode()


@pytest.mark.parametrize(
    ("served", "catalogue"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen2.5-7B"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
    ],
)
def test_served_model_names_map_to_the_catalogue(served: str, catalogue: str) -> None:
    assert adapters.catalogue_model_name(served) == catalogue


def test_a_placement_no_instance_can_serve_from_is_not_shown_as_valid(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/mig/",
        {"gpu": "H100-SXM", "deployments": ["chat"], "layouts": "7g\n7x1g"},
    )
    rows = {r.layout: r for r in response.context["rows"]}
    assert rows["7g.80gb"].status == "serves"
    # NVIDIA allows the placement; the model does not fit a 1g instance.
    assert rows["7x1g.10gb"].valid and rows["7x1g.10gb"].status == "does not serve"
    assert rows["7x1g.10gb"].requests_per_s == MISSING
    assert "does not serve" in response.content.decode()


def test_deployments_sharing_a_gpus_slices_are_priced_per_slice_with_idle_slices(
    chat: Deployment, browser_client: Client
) -> None:
    Deployment.objects.create(
        name="chat-b",
        model_name=chat.model_name,
        gpu_type=chat.gpu_type,
        slo_itl_p95_ms=chat.slo_itl_p95_ms,
    )
    response = browser_client.get(
        "/capacity/mig/",
        {
            "gpu": "H100-SXM",
            "layouts": "4g:chat+3g:chat-b\n3g:chat+3g:chat-b",
        },
    )
    assert response.status_code == 200, response.context["errors"]
    assert response.context["rows"] == []
    shared = {r.layout: r for r in response.context["shared_rows"]}
    full = shared["4g.40gb:chat + 3g.40gb:chat-b"]
    assert full.status == "serves" and full.idle_slices == 0
    assert [d.split(":")[0] for d in full.deployments] == ["chat", "chat-b"]
    assert "GPUs laid out this way" in full.deployments[0]  # chat has a peak hour
    part = shared["3g.40gb:chat + 3g.40gb:chat-b"]
    assert part.status == "serves" and part.idle_slices == 1
    # H100 at $6.88 per GPU-hour: one of seven compute slices stranded (3g
    # instances take all eight memory slices between them).
    assert part.idle_cost_per_hour == f"${6.88 / 7:.2f}/h"
    assert sum(r.best for r in shared.values()) == 1


def test_a_shared_layout_naming_an_unknown_deployment_is_refused_naming_it(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get(
        "/capacity/mig/", {"gpu": "H100-SXM", "layouts": "4g:chat+3g:chatt"}
    )
    assert any(
        "'chatt'" in e and "no deployment" in e for e in response.context["errors"]
    )


def test_the_mig_page_starts_from_the_gpu_the_fleets_mig_deployments_run(
    chat: Deployment, browser_client: Client
) -> None:
    Deployment.objects.create(
        name="mod",
        model_name=chat.model_name,
        gpu_type="A100-80GB",
        mig_profile="2g.20gb",
    )
    response = browser_client.get("/capacity/mig/")
    assert response.context["form"]["gpu"].value() == "A100-80GB"
