from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytics.capacity import Scenario, compare, evaluate, evaluate_grid, search
from analytics.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[3]
BASE = Scenario(
    model="Llama-3.1-8B",
    gpu="H100-SXM",
    max_model_len=8192,
    prompt_tokens=512,
    output_tokens=256,
    itl_sla_ms=50,
    gpu_hour_price=6.88,
    target_requests_per_s=40,
)


def test_uncalibrated_predictions_say_they_are_roofline() -> None:
    result = evaluate(BASE)
    assert result.calibration.label == "roofline, uncalibrated"
    assert result.feasible and result.batch_size >= 1
    assert result.itl_at_percentile_ms <= 50


def test_the_grid_gives_the_same_numbers_as_the_single_path() -> None:
    scenarios = [
        replace(BASE, kv_dtype=k, gpu=g, tp=t)
        for k in ("auto", "fp8")
        for g in ("H100-SXM", "A100-80GB", "L40S")
        for t in (1, 2)
    ]
    grid = evaluate_grid(scenarios)
    for i, scenario in enumerate(scenarios):
        single = evaluate(scenario)
        assert grid.loc[i, "kv_cache_tokens"] == single.kv_cache_tokens
        assert grid.loc[i, "batch_size"] == single.batch_size
        assert grid.loc[i, "cost_per_1k_requests"] == pytest.approx(
            single.cost_per_1k_requests
        )


def test_the_grid_keeps_infeasible_rows_with_a_reason() -> None:
    grid = evaluate_grid(
        pd.DataFrame(
            {
                "model": ["Llama-3.1-70B", "Llama-3.2-1B"],
                "gpu": ["L4", "L4"],
                "max_model_len": [4096, 4096],
            }
        )
    )
    assert list(grid["feasible"]) == [False, True]
    assert "exceed" in grid.loc[0, "reason"]


def test_replicas_and_cost_follow_the_target_traffic() -> None:
    result = evaluate(BASE)
    assert result.replicas == int(np.ceil(40 / result.max_requests_per_s_within_sla))
    assert result.cost_per_hour == pytest.approx(6.88 * result.replicas)
    assert result.cost_per_1k_requests == pytest.approx(
        result.cost_per_hour / (40 * 3600) * 1000
    )


def test_moe_step_time_grows_as_the_batch_touches_more_experts() -> None:
    small = evaluate(replace(BASE, model="Qwen3-30B-A3B", itl_sla_ms=12))
    large = evaluate(replace(BASE, model="Qwen3-30B-A3B", itl_sla_ms=60))
    assert large.batch_size > small.batch_size
    assert large.decode_step_ms > small.decode_step_ms


def test_compare_reports_deltas_against_the_base() -> None:
    result = compare(BASE, [{"kv_dtype": "fp8"}, {"gpu": "H200"}])
    fp8 = {d.field: d for d in result.deltas[0]}
    assert fp8["kv_cache_tokens"].relative == pytest.approx(1.0, rel=0.01)
    assert fp8["cost_per_1k_requests"].absolute <= 0


def test_invalid_input_names_the_field_and_the_value() -> None:
    with pytest.raises(InvalidInput) as err:
        evaluate(replace(BASE, gpu_memory_utilization=1.5))
    assert err.value.field == "gpu_memory_utilization" and err.value.value == 1.5
    with pytest.raises(InvalidInput, match="gpu='B300'"):
        evaluate(replace(BASE, gpu="B300"))


def test_search_ranks_feasible_configs_and_explains_the_rest() -> None:
    space = {
        "gpu": ["H100-SXM", "A100-80GB", "L40S", "L4"],
        "tp": [1, 2],
        "kv_dtype": ["auto", "fp8"],
        "model": ["Llama-3.1-8B", "Llama-3.1-70B"],
    }
    found = search(space, {"max_ttft_ms": 800}, "cost_per_1k_requests", base=BASE)
    assert len(found.ranked) > 0 and len(found.infeasible) > 0
    assert found.ranked["score"].is_monotonic_increasing
    assert found.infeasible["reason"].notna().all()
    front = found.pareto.sort_values("cost_per_1k_requests")
    assert front["p95_latency_s"].is_monotonic_decreasing


def test_search_offers_the_seed_weighted_objective() -> None:
    found = search(
        {"kv_dtype": ["auto", "fp8"], "max_num_batched_tokens": [512, 2048]},
        None,
        "seed_weighted",
        base=BASE,
    )
    row = found.ranked.iloc[0]
    expected = (
        0.6 * row["p95_latency_s"]
        + 0.3 * row["gpu_memory_gb"] / 40
        + 0.1 * row["cost_per_1k_requests"] / 1.5
    )
    assert row["score"] == pytest.approx(expected)


def _cli(document: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analytics.capacity"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_cli_writes_stable_fields_and_exits_0() -> None:
    done = _cli(
        {
            "model": "Llama-3.1-8B",
            "gpu": "H100-SXM",
            "max_model_len": 8192,
            "gpu_hour_price": 6.88,
        }
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for name in (
        "kv_bytes_per_token",
        "weights_bytes",
        "kv_cache_memory_bytes",
        "num_gpu_blocks",
        "kv_cache_tokens",
        "max_concurrency",
        "decode_step_ms",
        "throughput_tokens_per_s",
        "max_requests_per_s_within_sla",
        "gpus_needed",
        "cost_per_1k_requests",
        "cost_per_1m_tokens",
        "calibration",
        "warnings",
    ):
        assert name in out


def test_cli_exits_2_naming_field_and_value_on_bad_input() -> None:
    done = _cli({"model": "Llama-3.1-8B", "gpu": "H100-SXM", "tp": 0})
    assert done.returncode == 2
    out = json.loads(done.stdout)
    assert out["field"] == "tp" and out["value"] == 0


def test_cli_exits_2_when_the_model_leaves_no_memory_for_kv_as_vllm_refuses() -> None:
    # vLLM refuses to start here ("No available memory for the cache blocks").
    done = _cli({"model": "Llama-3.1-70B", "gpu": "L4"})
    assert done.returncode == 2
    out = json.loads(done.stdout)
    assert out["feasible"] is False and out["starts"] is False
    assert out["refusal"] == "no_kv_memory"
    assert out["reason"].startswith("No available memory for the cache blocks.")


def test_cli_exits_3_when_it_starts_but_no_batch_meets_the_sla() -> None:
    done = _cli(
        {"model": "Llama-3.1-8B", "gpu": "L4", "max_model_len": 4096, "itl_sla_ms": 1}
    )
    assert done.returncode == 3
    out = json.loads(done.stdout)
    assert out["feasible"] is False and out["starts"] is True
