"""The back-test of "today" compares like with like and finds a declared error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytics.capacity.backtest import (
    HourObservation,
    backtest_today,
    predicted_itl_s,
    telemetry_frame,
)
from analytics.capacity.calibration import fit_from_telemetry
from analytics.capacity.calibration_types import CalibrationKey
from analytics.capacity.engine import Scenario, evaluate, step_model

TODAY = Scenario(
    model="Llama-3.1-8B",
    gpu="H100-SXM",
    max_model_len=8192,
    prompt_tokens=512,
    output_tokens=256,
    itl_sla_ms=50,
    gpu_hour_price=6.88,
)
BATCHES = [4, 8, 12, 16, 24, 32, 48, 64, 80, 96, 64, 32, 16, 8]


def _hours(true_factor: float, *, replicas: float = 4.0) -> list[HourObservation]:
    """Telemetry from a declared true ITL curve: ``true_factor`` x the roofline's
    mean ITL at each hour's batch (not the engine's own output when factor != 1)."""
    model = step_model(TODAY)
    hours = []
    for i, batch in enumerate(BATCHES):
        itl = true_factor * predicted_itl_s(model, TODAY, batch)
        tokens = batch / itl * 3600 * replicas
        hours.append(
            HourObservation(
                hour=f"2026-11-30T{i:02d}:00Z",
                replicas=replicas,
                running_per_replica=batch,
                itl_sum_s=itl * tokens,
                itl_count=tokens,
                output_tokens_per_s_per_replica=batch / itl,
                requests_per_s=batch / itl * replicas / TODAY.output_tokens,
                itl_p95_ms=itl * 1e3 * 1.2,
            )
        )
    return hours


def test_a_true_curve_30_percent_slower_than_the_roofline_is_reported_within_5_points() -> (
    None
):
    found = backtest_today(TODAY, _hours(1.3))
    declared = 1 / 1.3 - 1  # the roofline predicts 23% less ITL than observed
    assert found.itl_error is not None and found.throughput_error is not None
    assert abs(found.itl_error - declared) < 0.05
    assert abs(found.throughput_error - 0.3) < 0.05  # and 30% more tokens/s
    assert found.large_error and found.offer_telemetry_fit
    assert any("large error" in m for m in found.messages)


def test_after_fitting_from_the_same_telemetry_the_error_is_below_10_percent() -> None:
    hours = _hours(1.3)
    calibration = fit_from_telemetry(
        telemetry_frame(hours),
        key=CalibrationKey(
            gpu="H100-SXM",
            model="Llama-3.1-8B",
            weight_dtype="bf16",
            kv_dtype="auto",
            tp=1,
        ),
        context_tokens=TODAY.prompt_tokens + TODAY.output_tokens / 2,
        prompt_tokens=TODAY.prompt_tokens,
        output_tokens=TODAY.output_tokens,
    )
    found = backtest_today(TODAY, hours, calibrations=[calibration])
    assert found.calibration.startswith("engine_measurements")
    assert found.itl_error is not None and abs(found.itl_error) < 0.10
    assert found.throughput_error is not None and abs(found.throughput_error) < 0.10
    assert not found.large_error and not found.offer_telemetry_fit


def test_agreement_on_engine_generated_telemetry_is_marked_circular() -> None:
    found = backtest_today(TODAY, _hours(1.0), circular=True)
    assert found.itl_error == pytest.approx(0.0, abs=1e-9)
    assert found.circular and not found.offer_telemetry_fit
    assert any(m.startswith("circular") for m in found.messages)


def _peak(
    *, replicas: int, running: float, requests_per_s: float, itl_p95_ms: float
) -> HourObservation:
    """A peak hour read from gauges and the p95 alone (no ITL histogram)."""
    return HourObservation(
        hour="peak",
        replicas=replicas,
        running_per_replica=running,
        itl_sum_s=None,
        itl_count=None,
        requests_per_s=requests_per_s,
        itl_p95_ms=itl_p95_ms,
    )


def test_replicas_are_checked_one_sided_headroom_is_not_error() -> None:
    per_replica = evaluate(TODAY).max_requests_per_s_within_sla
    # 14 replicas met the SLA while the traffic needed fewer: headroom.
    met = _peak(
        replicas=14, running=32, requests_per_s=per_replica * 10.5, itl_p95_ms=40.0
    )
    found = backtest_today(TODAY, [met])
    check = found.hours[0]
    assert check.replicas_predicted == 11
    assert check.replicas_verdict == "within" and check.headroom_replicas == 3
    assert found.replicas_ok is True
    # Predicting 19 where 14 met the SLA is an error the back-test names.
    over = replace(met, requests_per_s=per_replica * 18.5)
    found = backtest_today(TODAY, [over])
    assert found.replicas_ok is False
    assert any("predicted 19 replicas where 14 met" in m for m in found.messages)
    # An hour that missed the SLA says nothing about the minimum.
    missed = replace(over, itl_p95_ms=80.0)
    assert backtest_today(TODAY, [missed]).replicas_ok is None


def test_missing_telemetry_stays_missing() -> None:
    empty = HourObservation(
        hour="h", replicas=None, running_per_replica=None, itl_sum_s=None, itl_count=0
    )
    found = backtest_today(TODAY, [empty])
    assert found.itl_error is None and found.throughput_error is None
    assert found.hours[0].observed_itl_ms is None
    assert not found.large_error
    assert any("nothing to compare" in m for m in found.messages)


def test_telemetry_that_agrees_with_itself_is_consistent() -> None:
    found = backtest_today(TODAY, _hours(1.3))
    # tokens/s = running / mean ITL exactly; the first tokens (1 in 256) are
    # allowed on top, so the ratio sits just under 1.
    assert found.telemetry_ratio == pytest.approx(256 / 257, rel=1e-9)
    assert found.telemetry_consistent is True
    assert not any("inconsistent" in m for m in found.messages)


def test_tokens_per_s_above_running_over_itl_is_named_inconsistent() -> None:
    """A running gauge at 1/1.42 of what the ITL histogram and the token counter
    imply (the demo chat's shape): no step model can match both figures, and the
    back-test says neither throughput nor replicas are evidence on it."""
    hours = [
        replace(h, running_per_replica=h.running_per_replica / 1.42)  # type: ignore[operator]
        for h in _hours(1.0)
    ]  # fmt: skip
    found = backtest_today(TODAY, hours)
    assert found.telemetry_ratio == pytest.approx(1.42 * 256 / (256 + 1.42), rel=1e-6)
    assert found.telemetry_consistent is False
    assert all(h.telemetry_ratio and h.telemetry_ratio > 1.3 for h in found.hours)
    (message,) = [m for m in found.messages if m.startswith("telemetry inconsistent")]
    assert (
        "1.41x" in message
        and "the replica check" in message
        and "engine is wrong" in message
    )


def test_without_the_four_figures_consistency_is_unknown_not_assumed() -> None:
    hours = [replace(h, requests_per_s=None) for h in _hours(1.0)]
    found = backtest_today(TODAY, hours)
    assert found.telemetry_ratio is None and found.telemetry_consistent is None


def test_an_over_verdict_names_the_prefill_stalls_that_bound_the_replica() -> None:
    """The demo chat's shape: 454 output tokens, so above 22.7 running requests
    more than 5% of ITL samples sit in steps carrying a ~90 ms prefill."""
    chat = Scenario(
        model="Llama-3.1-70B",
        gpu="H100-SXM",
        tp=4,
        kv_dtype="fp8",
        prompt_tokens=1817,
        output_tokens=454,
        itl_sla_ms=60,
        prefix_cache_hit_rate=0.35,
    )
    base = evaluate(chat)
    assert base.batch_size == 22  # floor(454 x 0.05), not the KV cache or SLA mean
    assert base.itl_mean_ms < 60 and base.prefill_ms > 60
    over = _peak(replicas=15, running=15.3, requests_per_s=15 * 2.09, itl_p95_ms=52.0)
    found = backtest_today(chat, [over])
    assert found.replicas_ok is False
    (message,) = [m for m in found.messages if "prefill stalls" in m]
    assert "at a batch of 22" in message and "above 22.7 running requests" in message
    # Within, the bound is not mentioned.
    within = replace(over, requests_per_s=15 * 1.5)
    assert not any(
        "prefill stalls" in m for m in backtest_today(chat, [within]).messages
    )
