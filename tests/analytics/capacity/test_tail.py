"""The ITL tail: the closed form's p95 with a fitted spread and stall, fitted
from hourly p95 and mean ITL, and refused on telemetry that cannot carry it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analytics.capacity import latency as lat
from analytics.capacity.backtest import HourObservation, backtest_today
from analytics.capacity.calibration import CalibrationRefused
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    Calibration,
    CalibrationKey,
    FitQuality,
)
from analytics.capacity.engine import Scenario, evaluate, step_model
from analytics.capacity.latency import LatencyParams
from analytics.capacity.tail import fit_tail, fit_telemetry, tail_terms

# The demo chat's shape: above 22.7 running requests (5% of 454 output tokens)
# more than 5% of the steps carry a ~86 ms prefill chunk.
CHAT = Scenario(
    model="Llama-3.1-70B",
    gpu="H100-SXM",
    tp=4,
    kv_dtype="fp8",
    prompt_tokens=1817,
    output_tokens=454,
    itl_sla_ms=60,
    prefix_cache_hit_rate=0.35,
)
KEY = CalibrationKey(
    gpu="H100-SXM", model="Llama-3.1-70B", weight_dtype="bf16", kv_dtype="fp8", tp=4
)
BATCHES = np.linspace(8.0, 34.0, 27)  # both sides of the 22.7 threshold
NOISE = 0.02  # per-hour scatter of the mean and the p95 (2%, seeded)


def _telemetry(
    *, factor: float, stall: float, mean_scale: float = 1.0, seed: int = 3
) -> pd.DataFrame:
    """Hourly telemetry from a declared tail: p95 = max(step + stall x chunk
    above the threshold, factor x mean), with 2% scatter on both figures."""
    model = step_model(CHAT)
    rng = np.random.default_rng(seed)
    rows = []
    for batch in BATCHES:
        t = tail_terms(model, CHAT, float(batch), 0.95)
        p95 = lat.percentile_itl_s(
            np.asarray(t.decode_step_s),
            np.asarray(t.mean_itl_s),
            chunk_s=np.asarray(t.chunk_s),
            share_with_prefill=np.asarray(t.share_with_prefill),
            percentile=0.95,
            factor=factor,
            stall=stall,
        )
        rows.append(
            {
                "mean_running_batch": float(batch),
                "itl_seconds": t.mean_itl_s * mean_scale * (1 + rng.normal(0, NOISE)),
                "itl_p95_seconds": float(p95) * (1 + rng.normal(0, NOISE)),
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("factor", "stall"),
    [
        (1.5, 0.5),  # a spread and half a chunk: prefill spread over more steps
        (1.1, 1.0),  # vLLM's chunked prefill: the whole chunk in the step
        (2.0, 2.5),  # prompts in the length tail: stalls of several mean chunks
    ],
)
def test_the_fit_recovers_a_declared_tail_within_3_percent_and_0_05_chunks(
    factor: float, stall: float
) -> None:
    fit = fit_tail(
        _telemetry(factor=factor, stall=stall), model=step_model(CHAT), scenario=CHAT
    )
    assert fit.factor_fitted and fit.stall_fitted
    assert fit.itl_percentile_factor == pytest.approx(factor, rel=0.03)
    assert fit.stall_fraction == pytest.approx(stall, abs=0.05)
    assert fit.hours_below + fit.hours_above == len(BATCHES) == fit.n_points
    assert fit.hours_below == int((BATCHES <= 22.7).sum())
    assert fit.mape < 0.03


def test_a_stall_free_tail_fits_the_p95_at_every_hour_with_a_bounded_stall() -> None:
    """The demo's shape of telemetry: p95 = 2 x the mean on both sides of the
    threshold. The stall is then the largest the hourly p95 allows (it hides
    under the spread), not a measured one; the p95 at each hour still matches."""
    hourly = _telemetry(factor=2.0, stall=0.0)
    model = step_model(CHAT)
    fit = fit_tail(hourly, model=model, scenario=CHAT)
    assert fit.itl_percentile_factor == pytest.approx(2.0, rel=0.03)
    bound = max(
        (2.0 * t.mean_itl_s - t.decode_step_s) / t.chunk_s
        for t in (tail_terms(model, CHAT, float(b), 0.95) for b in BATCHES if b > 22.7)
    )
    assert 0 <= fit.stall_fraction <= bound * 1.05
    assert fit.mape < 0.03


def _calibration(**tail: float) -> Calibration:
    m = step_model(CHAT)
    params = LatencyParams(
        t0_s=m.t0_s,
        bw_eff_bytes_per_s=m.bw_eff,
        decode_flops_eff=m.decode_flops,
        prefill_flops_eff=m.prefill_flops,
        p0_s=m.p0_s,
        **tail,
    )
    return Calibration(
        ENGINE_MEASUREMENTS, KEY, params, FitQuality(1, None, None, "test")
    )


def test_the_default_tail_is_the_whole_chunk_and_a_fitted_one_moves_the_batch() -> None:
    roofline = evaluate(CHAT)
    same = evaluate(CHAT, calibrations=[_calibration()])
    assert roofline.batch_size == same.batch_size == 22  # floor(454 x 0.05)
    # No stall at the percentile: the mean-ITL SLA binds, far above 22.
    free = evaluate(CHAT, calibrations=[_calibration(stall_fraction=0.0)])
    assert free.batch_size > 100
    # A spread of 2 x the mean below the threshold: fewer than 22.
    spread = evaluate(
        CHAT, calibrations=[_calibration(stall_fraction=0.0, itl_percentile_factor=2.0)]
    )
    assert 22 < spread.batch_size < free.batch_size
    assert (
        spread.itl_at_percentile_ms
        <= 60
        < 2.0
        * evaluate(
            replace(CHAT, max_num_seqs=int(spread.batch_size) + 1, itl_sla_ms=1e9),
            calibrations=[_calibration(stall_fraction=0.0)],
        ).itl_mean_ms
    )


def _refusal(hourly: pd.DataFrame, scenario: Scenario = CHAT) -> CalibrationRefused:
    with pytest.raises(CalibrationRefused) as refused:
        fit_tail(hourly, model=step_model(scenario), scenario=scenario)
    return refused.value


def test_telemetry_without_a_p95_is_refused_naming_the_field() -> None:
    hourly = _telemetry(factor=1.5, stall=0.5).assign(itl_p95_seconds=np.nan)
    refused = _refusal(hourly)
    assert (refused.field, refused.value) == ("telemetry.itl_p95_ms", None)
    assert "no hour with traffic has a p95 ITL" in refused.reason
    assert "27 hours with a mean ITL" in refused.reason


def test_a_p95_below_the_mean_is_refused_with_its_ratio() -> None:
    hourly = _telemetry(factor=1.5, stall=0.5)
    hourly["itl_p95_seconds"] = hourly["itl_seconds"] * 0.8
    refused = _refusal(hourly)
    assert refused.field == "telemetry.itl_p95_ms"
    assert refused.value == "median 0.80 x the hour's mean ITL"
    assert "below the mean ITL" in refused.reason


def test_one_hour_is_refused_as_too_few() -> None:
    refused = _refusal(_telemetry(factor=1.5, stall=0.5).iloc[:1])
    assert (refused.field, refused.value) == ("telemetry.rows", 1)
    assert "at least 6 hours" in refused.reason


def test_a_p95_below_the_predicted_mean_blames_the_decode_step_not_the_tail() -> None:
    # Observed ITL at half what the engine predicts: its p95 (1.5 x that) is
    # under the predicted mean at the same batch.
    hourly = _telemetry(factor=1.5, stall=0.5)
    hourly["itl_seconds"] *= 0.5
    hourly["itl_p95_seconds"] = hourly["itl_seconds"] * 1.5
    refused = _refusal(hourly)
    assert refused.field == "telemetry.itl_p95_ms"
    assert refused.value.endswith("x the predicted mean ITL")
    assert "fit the decode step" in refused.reason


def test_a_stall_beyond_five_chunks_and_another_percentile_are_refused() -> None:
    refused = _refusal(_telemetry(factor=1.2, stall=8.0))
    assert refused.field == "stall_fraction" and refused.value == pytest.approx(
        8, abs=0.3
    )
    refused = _refusal(
        _telemetry(factor=1.2, stall=0.5), replace(CHAT, sla_percentile=0.99)
    )
    assert (refused.field, refused.value) == ("scenario.sla_percentile", 0.99)


def test_with_no_hour_above_the_threshold_the_stall_is_kept_and_said_so() -> None:
    hourly = _telemetry(factor=1.5, stall=0.0)
    fit = fit_tail(
        hourly[hourly["mean_running_batch"] < 22], model=step_model(CHAT), scenario=CHAT
    )
    assert fit.stall_fitted is False and fit.stall_fraction == 1.0
    assert "stall not fitted: 0 hours above the stall threshold of 22.7" in fit.method


def _hours(hourly: pd.DataFrame, *, replicas: float) -> list[HourObservation]:
    """Hours of a fleet of ``replicas`` whose tokens agree with their ITL."""
    out = []
    for i, row in hourly.reset_index(drop=True).iterrows():
        itl, batch = float(row["itl_seconds"]), float(row["mean_running_batch"])
        tokens = batch / itl * 3600 * replicas
        out.append(
            HourObservation(
                hour=f"h{i:02d}",
                replicas=replicas,
                running_per_replica=batch,
                itl_sum_s=itl * tokens,
                itl_count=tokens,
                output_tokens_per_s_per_replica=batch / itl,
                requests_per_s=batch / itl * replicas / CHAT.output_tokens,
                itl_p95_ms=float(row["itl_p95_seconds"]) * 1e3,
            )
        )
    return out


def test_stall_free_telemetry_fails_the_replica_check_until_the_tail_is_fitted() -> (
    None
):
    """Like the demo chat: p95 = 1.9 x the mean and no stall. Before the fit the
    closed form's stall caps the batch at 22 where hours ran at up to 34 within
    the SLA, and the back-test says the model disagrees on the tail; after the
    combined fit (decode step and tail) the check passes."""
    hourly = _telemetry(factor=1.9, stall=0.0)
    hours = _hours(hourly, replicas=10)
    before = backtest_today(CHAT, hours)
    assert before.telemetry_consistent is True
    assert before.replicas_ok is False and before.offer_telemetry_fit
    (message,) = [m for m in before.messages if "disagrees on the ITL tail" in m]
    assert "fit the tail from its telemetry" in message
    assert before.itl_p95_error is not None and before.itl_p95_error < -0.15
    fitted = fit_telemetry(
        hourly,
        key=KEY,
        scenario=CHAT,
        current=step_model(CHAT),
        current_label="roofline",
    )
    assert fitted.params.stall_fraction < 0.6
    after = backtest_today(CHAT, hours, calibrations=[fitted])
    assert after.replicas_ok is True
    assert after.itl_p95_error == pytest.approx(0.0, abs=0.03)
    assert not any("disagrees on the ITL tail" in m for m in after.messages)


def test_a_refused_decode_fit_keeps_the_step_in_effect_and_fits_the_tail() -> None:
    """Mean ITL without the prefill share the engine adds (the decode step
    alone): the decode fit is refused as stall-free, the roofline step is kept,
    and the method says both."""
    model = step_model(CHAT)
    hourly = _telemetry(factor=1.9, stall=0.0)
    hourly["itl_seconds"] = [
        tail_terms(model, CHAT, b, 0.95).decode_step_s
        for b in hourly["mean_running_batch"]
    ]
    fitted = fit_telemetry(
        hourly, key=KEY, scenario=CHAT, current=model, current_label="roofline"
    )
    assert (
        fitted.params.t0_s == model.t0_s
        and fitted.params.bw_eff_bytes_per_s == model.bw_eff
    )
    assert fitted.fit.method.startswith("decode step kept from roofline")
    assert "carries no prefill work" in fitted.fit.method
    assert "tail from hourly p95 ITL" in fitted.fit.method
    # Both refused: the decode refusal, with the tail's after it.
    with pytest.raises(CalibrationRefused) as refused:
        fit_telemetry(
            hourly.assign(itl_p95_seconds=np.nan),
            key=KEY,
            scenario=CHAT,
            current=model,
            current_label="roofline",
        )
    assert refused.value.field == "telemetry.itl_seconds"
    assert "and the tail cannot be fitted either" in refused.value.reason
