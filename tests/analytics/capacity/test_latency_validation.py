"""Latency validation against public serving benchmarks (docs/capacity-validation.md).

The tables in the doc's "Latency validation" section are recomputed here from
analytics/capacity/data/latency_validation.json, line for line, so the doc and
the data cannot drift apart.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytics.capacity import latency_validation as lv
from analytics.capacity.calibration_fit import _setting, fit_decode
from analytics.capacity.calibration_types import CalibrationKey
from analytics.capacity.engine import StepModel, step_model
from analytics.capacity.simulate import simulate
from analytics.errors import InvalidInput

DOC = Path(__file__).resolve().parents[3] / "docs" / "capacity-validation.md"


@pytest.fixture(scope="module")
def rows() -> list[lv.BenchRow]:
    return lv.load_benchmarks()


@pytest.fixture(scope="module")
def table(rows: list[lv.BenchRow]) -> pd.DataFrame:
    return lv.validation_table(rows)


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert "## Latency validation" in text
    return text.split("## Latency validation", 1)[1]


def test_at_least_ten_public_results_each_with_its_link_and_figures(
    rows: list[lv.BenchRow],
) -> None:
    assert len(rows) >= 10
    assert len({r.gpu for r in rows}) >= 2
    for r in rows:
        assert r.source.startswith("https://"), r.id
        assert r.measured.median_ttft_ms > 0 and r.measured.median_itl_ms > 0
        assert r.measured.output_throughput > 0
        assert r.input_len > 0 and r.output_len > 0 and r.tp >= 1
    assert len({r.id for r in rows}) == len(rows)


def test_the_doc_tables_are_the_ones_the_data_gives(
    rows: list[lv.BenchRow], table: pd.DataFrame
) -> None:
    section = _section()
    expected = (
        lv.rows_markdown(rows)
        + lv.errors_markdown(table)
        + lv.summary_markdown(lv.error_summary(table))
    )
    missing = [line for line in expected if line not in section]
    assert not missing, "\n".join(missing[:5])


def test_every_row_gets_three_methods_and_transfer_only_from_another_model(
    rows: list[lv.BenchRow], table: pd.DataFrame
) -> None:
    assert len(table) == 3 * len(rows)
    transfer = table[table["method"] == "transfer"]
    for _, line in transfer.dropna(subset=["itl_pred"]).iterrows():
        assert f"from {line['model']}" not in line["calibration"]
        assert "transferred from" in line["calibration"]
    same = table[table["method"] == "same_model"].dropna(subset=["itl_pred"])
    for _, line in same.iterrows():
        # Leave-one-out: the row itself is never among the fitted runs.
        fitted = line["calibration"].split(": ", 1)[1].split(", ")
        assert line["id"] not in fitted


def test_the_calibrated_goal_and_the_roofline_error_are_what_the_doc_says(
    table: pd.DataFrame,
) -> None:
    summary = lv.error_summary(table)
    same = summary.loc["same_model"]
    # The goal (15%) is met on the median of both figures with calibration ...
    assert same["itl_median"] <= 0.15 and same["throughput_median"] <= 0.15
    # ... and the roofline is worse than either calibration on ITL.
    assert summary.loc["roofline", "itl_median"] > same["itl_median"]
    assert summary.loc["roofline", "itl_median"] > summary.loc["transfer", "itl_median"]


def test_steady_batch_follows_littles_law_by_hand() -> None:
    # 2 req/s, 101 tokens (100 gaps) of 20 ms: 2 x 100 x 0.02 = 4 decoding.
    assert lv.steady_batch_for_rate(2.0, 101, 0.02) == pytest.approx(4.0)
    with pytest.raises(InvalidInput):
        lv.steady_batch_for_rate(1.0, 0, 0.02)


def _toy_model() -> StepModel:
    # Decode step = t0 + weights/BW = 0.01 + 1e10/1e12 = 0.02 s at any batch;
    # prefill of P tokens = P^2 x 1e6 / 1e12 s (0.01 s at P = 100).
    return StepModel(
        t0_s=0.01,
        bw_eff=1e12,
        decode_flops=1e12,
        prefill_flops=1e12,
        p0_s=0.005,
        dense_bytes=1e10,
        expert_bytes=0.0,
        experts=0.0,
        top_k=0.0,
        kv_bytes_per_token=0.0,
        active_params_per_gpu=0.0,
        attn_coef=1e6,
        num_gpu_blocks=10_000,
        block_size=16,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
    )


def _closed_loop(
    rows: list[lv.BenchRow],
    *,
    concurrency: int,
    prompts: int,
    input_len: int,
    output_len: int,
) -> lv.BenchRow:
    """The fixture's concurrency row made a small closed loop of its own, with
    no measured completion count to hold the run to."""
    row = next(r for r in rows if r.load == "concurrency")
    return replace(
        row,
        max_concurrency=concurrency,
        num_prompts=prompts,
        input_len=input_len,
        output_len=output_len,
        measured=replace(row.measured, completed=None),
    )


def test_requests_reach_the_engine_p0_after_the_client_sends_them(
    rows: list[lv.BenchRow],
) -> None:
    row = _closed_loop(rows, concurrency=4, prompts=10, input_len=100, output_len=10)
    # All ten at p0: the simulation takes the first four and sends the rest
    # one per completion (the next test).
    assert lv.arrivals_for(row, _toy_model()) == pytest.approx(np.full(10, 0.005))
    burst = next(r for r in rows if r.load == "burst")
    assert np.all(lv.arrivals_for(burst, _toy_model()) == 0.005)


def test_a_closed_loop_row_is_predicted_over_the_whole_run_p0_included(
    rows: list[lv.BenchRow],
) -> None:
    """Two slots, four requests of 100 / 3 on the toy model: each wave is a
    0.03 s prefill step (t0 + 2 x 0.01) and two 0.02 s decode steps, and reaches
    the engine p0 = 5 ms after its send, so the run is 2 x 0.075 s and the
    throughput 12 tokens / 0.15 s = 80 tok/s (a steady C x output / E2E, 2 x 3
    / 0.07, would say 85.7)."""
    row = _closed_loop(rows, concurrency=2, prompts=4, input_len=100, output_len=3)
    sim = simulate(
        _toy_model(),
        lv.arrivals_for(row, _toy_model()),
        prompt_tokens=100,
        output_tokens=3,
        concurrency=2,
        resubmit_s=0.005,
    )
    assert sim.requests_completed == 4
    assert sim.duration_s == pytest.approx(0.15)
    assert sim.throughput_tokens_per_s == pytest.approx(80.0)
    assert sim.e2e_p50_ms == pytest.approx(70.0)
    # The same four as an open burst share one prefill step (t0 + 4 x 0.01) and
    # finish together: 12 tokens / 0.095 s.
    burst = simulate(
        _toy_model(), np.full(4, 0.005), prompt_tokens=100, output_tokens=3
    )
    assert burst.duration_s == pytest.approx(0.095)
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        simulate(
            _toy_model(), np.zeros(2), prompt_tokens=1, output_tokens=1, concurrency=0
        )


def test_a_one_context_sweep_fit_recovers_bandwidth_and_compute() -> None:
    key = CalibrationKey(gpu="A100-80GB", model="Qwen2.5-7B", tp=1)
    setting = _setting(key, None)
    bw, flops, context = 1.6e12, 2.0e14, 1536.0
    batch = np.array([1.0, 10.0, 40.0, 100.0, 200.0])
    step = (
        setting["t0"]
        + (setting["weights"] + batch * context * setting["kv"]) / bw
        + batch * 2 * setting["active"] / flops
    )
    points = pd.DataFrame(
        {"batch": batch, "context": np.full_like(batch, context), "step_s": step}
    )
    t0, bw_fit, flops_fit, method = fit_decode(points, setting)
    assert "line" in method
    assert t0 == pytest.approx(setting["t0"])
    assert bw_fit == pytest.approx(bw, rel=1e-6)
    assert flops_fit == pytest.approx(flops, rel=1e-6)


def test_a_sweep_too_narrow_to_split_weights_from_kv_still_reproduces_its_steps() -> (
    None
):
    """The 32B's bursts of 50-100 prompts: batch 25.5-28.2, steps flat at
    55.9 ms. The intercept's bandwidth (weights / (55.9 - t0) ms) leaves the
    slope less than the KV reads need, so that split would add 26 sequences'
    KV on top: 64 ms at batch 26, 15% over its own points. One bandwidth for
    all the bytes reproduces them, and the step at batch 10 is the weights'
    and ten sequences' KV at it."""
    key = CalibrationKey(gpu="A100-80GB", model="Qwen2.5-32B", tp=1)
    setting = _setting(key, None)
    batch = np.array([25.5, 26.1, 28.2])
    step = np.array([0.05595, 0.05591, 0.05594])
    context = 1536.0
    points = pd.DataFrame(
        {"batch": batch, "context": np.full_like(batch, context), "step_s": step}
    )
    t0, bw, flops, method = fit_decode(points, setting)
    assert "batch range too narrow to split weights from KV" in method
    read = setting["weights"] + batch * context * setting["kv"]
    predicted = t0 + read / bw + batch * 2 * setting["active"] / flops
    assert np.abs(predicted / step - 1).max() < 0.02  # was 15% off
    at_ten = t0 + (setting["weights"] + 10 * context * setting["kv"]) / bw
    assert at_ten < step.min()


def test_transfer_scales_the_step_overhead_by_the_layer_count() -> None:
    # 1 ms + 28 x 0.04 ms and 1 ms + 64 x 0.04 ms (TP 1: no all-reduce).
    assert lv.roofline_t0_s("Qwen2.5-7B", 1) == pytest.approx(2.12e-3)
    assert lv.roofline_t0_s("Qwen2.5-32B", 1) == pytest.approx(3.56e-3)


def test_a_bad_row_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        lv.row_from_dict({"load": "sometimes"}, "rows[3]")
    assert err.value.field == "rows[3].load"


def test_prefill_bound_runs_give_no_calibration_and_the_rest_are_unchanged(
    rows: list[lv.BenchRow], table: pd.DataFrame
) -> None:
    """The four H100 Qwen3-14B bursts have mean TPOT 3.0x-6.4x their median ITL:
    the importer refuses them, so they get no same-model fit and the 8B runs no
    transfer from them; every other row is still predicted by all it had."""
    stalled = {
        r.id
        for r in rows
        if r.measured.mean_tpot_ms
        and r.measured.mean_tpot_ms / r.measured.median_itl_ms > 2.0
    }
    assert stalled == {
        "h100-qwen3-14b-sharegpt-217-n1000",
        "h100-qwen3-14b-random-2000-n500",
        "h100-qwen3-14b-random-4000-n500",
        "h100-qwen3-14b-random-32000-n100",
    }
    same = table[table["method"] == "same_model"].set_index("id")
    assert same.loc[sorted(stalled), "itl_pred"].isna().all()
    assert same.drop(index=sorted(stalled))["itl_pred"].notna().all()
    transfer = table[table["method"] == "transfer"].set_index("id")
    eight_b = [r.id for r in rows if r.model_as == "Qwen3-8B"]
    assert transfer.loc[eight_b, "itl_pred"].isna().all()
    # No fitted calibration rests on a prefill-bound run.
    for source in table["calibration"].dropna():
        assert not any(s in source for s in stalled), source
    summary = lv.error_summary(table)
    assert summary.loc["same_model", "rows"] == 30
    assert summary.loc["same_model", "itl_within_15"] == 30
    assert summary.loc["same_model", "throughput_within_15"] == 30


def test_a_row_that_states_its_kv_pool_is_simulated_with_it(
    rows: list[lv.BenchRow],
) -> None:
    """The A100 write-up states each run's KV cache; the engine gets it as
    kv_cache_memory_bytes. Qwen2-7B keeps 2 x 28 layers x 4 KV heads x 128 x 2
    bytes = 57,344 bytes a token: 5.01 GiB is 5,863 blocks of 16 tokens; the
    32B, 2 x 64 x 8 x 128 x 2 = 262,144: 9.70 GiB is 2,483. Rows without a
    stated pool keep the memory model's."""
    by_id = {r.id: r for r in rows}
    for row_id, blocks in (
        ("a100-qwen25-7b-u25-n100", 5863),
        ("a100-qwen25-32b-u90-n100", 2483),
    ):
        gib = by_id[row_id].kv_cache_memory_gib
        assert gib is not None
        scenario = lv.scenario_for(by_id[row_id])
        assert scenario.kv_cache_memory_bytes == gib * 2**30
        assert step_model(scenario).num_gpu_blocks == blocks
    l4 = by_id["l4-qwen25-05b-c1"]
    assert l4.kv_cache_memory_gib is None
    assert lv.scenario_for(l4).kv_cache_memory_bytes is None
    with pytest.raises(InvalidInput) as err:
        lv.row_from_dict({**_raw_row(), "kv_cache_memory_gib": -1.0}, "rows[0]")
    assert err.value.field == "rows[0].kv_cache_memory_gib"


def _raw_row() -> dict[str, object]:
    data = json.loads(lv.DATA_PATH.read_text(encoding="utf-8"))
    return dict(data["rows"][0])
