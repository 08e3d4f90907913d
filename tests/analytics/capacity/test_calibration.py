from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytics.capacity import Scenario, evaluate
from analytics.capacity.calibration import (
    CalibrationRefused,
    calibration_from_dict,
    calibration_to_dict,
    fit_from_telemetry,
    import_vllm_bench_latency,
    import_vllm_bench_serve,
    load_calibration,
)
from analytics.capacity.calibration_fit import _setting
from analytics.capacity.calibration_types import Calibration, CalibrationKey
from analytics.errors import InvalidInput

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
KEY = CalibrationKey(
    gpu="L40S",
    model="Qwen3-8B",
    weight_dtype="bf16",
    kv_dtype="auto",
    tp=1,
    engine_version="0.10.1",
)


# A chat-like request on an L40S: 3,200 prompt tokens (35% from the prefix
# cache), 260 out.
CHAT_SHAPE = Scenario(
    model="Qwen3-8B", gpu="L40S", prompt_tokens=3200, output_tokens=260,
    prefix_cache_hit_rate=0.35, max_model_len=8192,
)  # fmt: skip


def _fit_chat_shape(frame: pd.DataFrame) -> Calibration:
    """The telemetry fit told CHAT_SHAPE's request (its context at mid-decode)."""
    return fit_from_telemetry(
        frame,
        key=KEY,
        context_tokens=3200 + 130,
        prompt_tokens=3200 * 0.65,
        output_tokens=260,
        cached_prompt_tokens=3200 * 0.35,
    )


def _bench(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_a_vllm_bench_serve_result_file_imports_and_reports_its_fit() -> None:
    results = [_bench("vllm_bench_serve_qwen3_vl_8b_1qps.json")]
    cal = import_vllm_bench_serve(results, key=KEY, source="fixture")
    assert cal.kind == "engine_measurements"
    assert cal.fit.n_points == 1 and cal.fit.mape is not None
    # Little's law: 125.8 tok/s x 27.9 ms = 3.5 sequences decoding at once.
    assert cal.points[0]["batch"] == pytest.approx(125.79 * 0.02791, rel=1e-3)
    result = evaluate(
        Scenario(
            model="Qwen3-8B",
            gpu="L40S",
            max_model_len=4096,
            prompt_tokens=200,
            output_tokens=128,
        ),
        calibrations=[cal],
    )
    assert result.calibration.kind == "engine_measurements"
    assert result.calibration.fit["mape"] == cal.fit.mape


def test_several_bench_runs_fit_bandwidth_and_compute_with_error_on_their_points() -> (
    None
):
    base = _bench("vllm_bench_serve_qwen3_vl_8b_1qps.json")
    runs = []
    # Same file shape at higher concurrency (synthetic values for the fit).
    for scale, itl in ((1, 27.3), (4, 29.0), (16, 34.0), (48, 47.0)):
        run = dict(
            base,
            output_throughput=scale * 1000 / itl,
            mean_tpot_ms=itl,
            median_itl_ms=itl,
        )
        runs.append(run)
    cal = import_vllm_bench_serve(runs, key=KEY)
    assert cal.fit.n_points == 4 and cal.fit.r2 is not None and cal.fit.r2 > 0.9
    assert cal.fit.mape < 0.05


def test_prefill_bound_runs_are_left_out_of_the_fit_and_named() -> None:
    """A run whose mean TPOT is over twice its median ITL spends most decode time
    in stalled steps: its median ITL does not pair with Little's law's batch on
    TPOT (the H100 Qwen3-14B bursts of the latency validation: 3.0x to 6.4x)."""
    base = _bench("vllm_bench_serve_qwen3_vl_8b_1qps.json")
    runs = [
        dict(base, output_throughput=s * 1000 / itl, mean_tpot_ms=itl, median_itl_ms=itl)
        for s, itl in ((1, 27.3), (4, 29.0), (16, 34.0), (48, 47.0))
    ]  # fmt: skip
    clean = import_vllm_bench_serve(runs, key=KEY)
    # A burst at a median ITL of 45 ms but a mean TPOT of 200 ms: Little's law
    # would put 4.4x the real batch beside a step of typical length.
    stalled = dict(
        base, output_throughput=500.0, mean_tpot_ms=200.0, median_itl_ms=45.0
    )
    with_stalled = import_vllm_bench_serve([*runs, stalled], key=KEY)
    assert with_stalled.fit.n_points == 4
    assert with_stalled.params == clean.params
    assert "1 of 5 runs left out as prefill-bound" in with_stalled.fit.method
    # Exactly 2x is not over the bound: kept.
    edge = dict(stalled, mean_tpot_ms=90.0)
    assert import_vllm_bench_serve([*runs, edge], key=KEY).fit.n_points == 5
    with pytest.raises(CalibrationRefused) as refused:
        import_vllm_bench_serve([stalled, dict(stalled, mean_tpot_ms=300.0)], key=KEY)
    assert refused.value.field == "results" and refused.value.value == [4.44, 6.67]
    assert "prefill-bound" in str(refused.value)


def test_a_vllm_bench_latency_file_imports_with_the_flags_it_was_run_with() -> None:
    cal = import_vllm_bench_latency(
        _bench("vllm_bench_latency_format.json"),
        key=KEY,
        batch_size=8,
        input_len=512,
        output_len=128,
    )
    assert cal.fit.n_points == 10 and cal.params.t0_s >= 0


def test_a_malformed_calibration_file_is_refused_naming_field_and_value() -> None:
    with pytest.raises(InvalidInput) as err:
        load_calibration(FIXTURES / "calibration_malformed.json")
    assert err.value.field == "params.bw_eff_bytes_per_s" and err.value.value == -3
    assert "params.bw_eff_bytes_per_s=-3" in str(err.value)


def test_an_unknown_schema_version_is_refused() -> None:
    doc = json.loads((FIXTURES / "calibration_malformed.json").read_text())
    doc["schema_version"] = 9
    with pytest.raises(InvalidInput, match="schema_version=9"):
        calibration_from_dict(doc)


def test_a_calibration_round_trips_through_its_json_form() -> None:
    cal = import_vllm_bench_serve(
        [_bench("vllm_bench_serve_qwen3_vl_8b_1qps.json")], key=KEY
    )
    again = calibration_from_dict(json.loads(json.dumps(calibration_to_dict(cal))))
    assert again.params == cal.params and again.key == cal.key


def test_telemetry_fit_recovers_the_slope_and_reports_r2() -> None:
    batch = np.array([4, 8, 12, 20, 28, 36, 44, 60], dtype=float)
    itl = 0.012 + 0.0004 * batch
    frame = pd.DataFrame({"mean_running_batch": batch, "itl_seconds": itl})
    cal = fit_from_telemetry(frame, key=KEY, context_tokens=1200)
    assert cal.fit.r2 == pytest.approx(1.0)
    assert cal.fit.mape < 1e-9


def _hourly_from_engine(
    scenario: Scenario, batch: np.ndarray, slower: float = 1.0
) -> pd.DataFrame:
    """Mean ITL as the engine computes it (decode step x ``slower`` plus the
    prefill share at its prefix-cache hits), one row per batch."""
    from analytics.capacity.backtest import predicted_itl_s
    from analytics.capacity.engine import step_model

    model = step_model(scenario)
    prompt, output = float(scenario.prompt_tokens), float(scenario.output_tokens)
    cached = prompt * float(scenario.prefix_cache_hit_rate or 0.0)
    itl = [
        predicted_itl_s(model, scenario, float(b))
        + (slower - 1.0) * model.decode_step_s(float(b), prompt + output / 2.0)
        for b in batch
    ]
    assert cached > 0
    return pd.DataFrame({"mean_running_batch": batch, "itl_seconds": itl})


def test_a_telemetry_fit_gives_back_the_engines_itl_with_prefix_cache_hits() -> None:
    """The fit takes out the prefill share the engine adds back: the new tokens'
    attention spans the cached prompt too. Taken out at the uncached length
    alone, the fitted decode step kept part of it and the engine counted it
    twice (+0.3% at batch 4 to +1.1% at batch 48 here: 3,200-token prompts,
    35% cached)."""
    from analytics.capacity.backtest import predicted_itl_s
    from analytics.capacity.engine import step_model

    scenario = CHAT_SHAPE
    batch = np.array([4, 8, 12, 16, 24, 32, 40, 48], dtype=float)
    hourly = _hourly_from_engine(scenario, batch, slower=1.3)
    cal = _fit_chat_shape(hourly)
    model = step_model(scenario, calibrations=[cal])
    again = [predicted_itl_s(model, scenario, float(b)) for b in batch]
    assert np.allclose(again, hourly["itl_seconds"], rtol=1e-6)


def test_stall_free_telemetry_is_refused_naming_the_prefill_share() -> None:
    """ITL that grows with the batch, but by less than the prefill sharing the
    steps adds on its own (the demo's chat): refused as carrying no prefill
    work, not as flat or noisy, with the slope it has and the share it lacks."""
    scenario = CHAT_SHAPE
    from analytics.capacity.engine import step_model

    model = step_model(scenario)
    batch = np.array([4, 8, 12, 16, 24, 32, 40, 48], dtype=float)
    # 0.1 ms per running request, where one 2,080-token prefill over 260
    # output tokens puts about 0.35 ms into every step on an L40S.
    itl = model.decode_step_s(1.0, 3330) + 1e-4 * batch
    assert model.prefill_work_s(2080, 1120) / 260 > 3e-4
    frame = pd.DataFrame({"mean_running_batch": batch, "itl_seconds": itl})
    with pytest.raises(CalibrationRefused) as refused:
        _fit_chat_shape(frame)
    raw = np.polyfit(batch, itl, 1)[0]
    assert refused.value.field == "telemetry.itl_seconds"
    assert refused.value.value == f"{raw * 1e3:.3f} ms per running request"
    assert "carries no prefill work" in refused.value.reason
    assert "too noisy" not in refused.value.reason
    # Without a request shape there is no share to take out: the line fits.
    assert fit_from_telemetry(frame, key=KEY, context_tokens=3330).fit.mape < 1e-6


def test_telemetry_that_is_too_flat_is_refused_with_a_reason() -> None:
    frame = pd.DataFrame(
        {
            "mean_running_batch": [20, 21, 20.5, 20, 21, 20.2],
            "itl_seconds": [0.02, 0.021, 0.02, 0.0205, 0.021, 0.02],
        }
    )
    with pytest.raises(CalibrationRefused, match="too flat"):
        fit_from_telemetry(frame, key=KEY, context_tokens=1000)


def test_the_harness_runs_on_cpu_and_writes_a_file_the_engine_loads(
    tmp_path: Path,
) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        message = "torch is needed: pip install -r requirements-harness.txt"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    out = tmp_path / "constants.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "analytics.capacity.harness",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--tiny",
            "--repeats",
            "2",
        ],
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    doc = json.loads(out.read_text())
    assert doc["kind"] == "hardware_constants" and doc["gemm_dtype"] == "float32"
    cal = load_calibration(out)
    assert cal.kind == "hardware_constants" and cal.fit.n_points == 9
    # File it under a catalogue GPU to see the engine use and label it.
    filed = replace(cal, key=replace(cal.key, gpu="L4"))
    result = evaluate(
        Scenario(model="Llama-3.2-1B", gpu="L4", max_model_len=2048),
        calibrations=[filed],
    )
    assert result.calibration.kind == "hardware_constants"


def test_the_harness_module_imports_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; "
        "import analytics.capacity.harness as h; print(h.SCHEMA_VERSION)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


A100_KEY = CalibrationKey(
    gpu="A100-80GB",
    model="Qwen2.5-7B",
    weight_dtype="bf16",
    kv_dtype="auto",
    tp=1,
    engine_version="0.10.1",
)


def _burst_run(batch: float, itl_ms: float, ttft_ms: float, **extra: object) -> dict:
    """A 1,024 / 1,024 ``vllm bench serve`` burst whose Little's law batch is
    ``batch`` (mean TPOT = median ITL)."""
    run = {
        "completed": 100,
        "duration": 60.0,
        "output_throughput": batch * 1000 / itl_ms,
        "total_input_tokens": 102_400,
        "total_output_tokens": 102_400,
        "median_ttft_ms": ttft_ms,
        "median_itl_ms": itl_ms,
        "mean_tpot_ms": itl_ms,
        "request_rate": "inf",
        "max_concurrency": None,
    }
    run.update(extra)
    return run


def _stalled_p99_ms(batch: float, itl_ms: float, rate: float, budget: int) -> float:
    """The p99 step of a burst: the decode step plus a chunk of the budget the
    decodes leave, of 1,024-token prompts, at ``rate`` FLOP/s."""
    setting = _setting(A100_KEY, None)
    tokens = budget - batch
    flops = tokens * 2 * setting["active"] + tokens * 1024 * setting["attn"]
    return itl_ms + flops / rate * 1000


def _a100_sweep(rate: float = 230e12, budget: int = 2048, **extra: object) -> list:
    # Light-load TTFT of 36 ms: 1,024 tokens of a 7B in 24 ms of compute is
    # over 600 TFLOP/s, twice the A100's 312 (prefix-cache hits in the run).
    runs = [_burst_run(1.0, 11.6, 36.0, **extra)]
    for batch, itl in ((40.0, 17.0), (80.0, 21.0), (160.0, 30.0)):
        p99 = _stalled_p99_ms(batch, itl, rate, budget)
        runs.append(_burst_run(batch, itl, 2000.0, p99_itl_ms=p99, **extra))
    return runs


def test_a_light_load_ttft_above_the_gpus_peak_does_not_set_the_prefill_rate() -> None:
    """1,024 tokens of a 7B (15.6 TFLOP) in 24 ms is 640 TFLOP/s on a 312
    TFLOP/s A100: not prefill compute. Rate and p0 stay the roofline's."""
    cal = import_vllm_bench_serve([_a100_sweep()[0]], key=A100_KEY)
    peak = 312e12
    assert cal.params.prefill_flops_eff == pytest.approx(0.5 * peak)
    assert cal.params.p0_s == pytest.approx(5e-3)
    assert "over the GPU's peak 312: not prefill compute" in cal.fit.method
    # Below peak it still sets the rate, p0 = 0, as before: 90 ms of work.
    slow = import_vllm_bench_serve([_burst_run(1.0, 11.6, 101.6)], key=A100_KEY)
    assert 156e12 < slow.params.prefill_flops_eff < peak
    assert slow.params.p0_s == 0.0


def test_stalled_bursts_set_the_prefill_rate_from_their_p99_step() -> None:
    """Each burst's p99 step carries the 2,048-token budget less its decodes
    (A100 V1 default) of prefill: p99 - median ITL at 230 TFLOP/s gives 230
    back; the light-load TTFT, below that prefill, leaves p0 the roofline's."""
    cal = import_vllm_bench_serve(_a100_sweep(), key=A100_KEY)
    assert cal.params.prefill_flops_eff == pytest.approx(230e12, rel=1e-9)
    assert cal.params.p0_s == pytest.approx(5e-3)
    assert "from the p99 - median ITL of 3 stalled burst(s)" in cal.fit.method
    assert "prefix-cache hits): p0 from the roofline" in cal.fit.method
    # The budget is the server's: a 4,096-token one, given, is read as given.
    wide = import_vllm_bench_serve(
        _a100_sweep(budget=4096), key=A100_KEY, max_num_batched_tokens=4096
    )
    assert wide.params.prefill_flops_eff == pytest.approx(230e12, rel=1e-9)


def test_closed_loops_and_stalls_under_a_full_chunk_do_not_set_the_rate() -> None:
    """A closed loop admits a prompt as a request ends (its chunk is one
    prompt of a length the file does not give); a stall shorter than the
    chunk at peak is not a full chunk. Neither sets the rate."""
    closed = import_vllm_bench_serve(
        _a100_sweep(request_rate="inf", max_concurrency=64), key=A100_KEY
    )
    assert closed.params.prefill_flops_eff == pytest.approx(156e12)
    assert "stalled" not in closed.fit.method
    runs = _a100_sweep()
    runs[1] = dict(runs[1], p99_itl_ms=_stalled_p99_ms(40.0, 17.0, 900e12, 2048))
    cal = import_vllm_bench_serve(runs, key=A100_KEY)
    assert cal.params.prefill_flops_eff == pytest.approx(230e12, rel=1e-9)
    assert "of 2 stalled burst(s)" in cal.fit.method
    assert "1 stalled burst(s) left out" in cal.fit.method
