from __future__ import annotations

import pytest

from analytics.capacity import (
    Scenario,
    evaluate,
    poisson_arrivals,
    simulate,
    step_model,
)

SCENARIO = Scenario(
    model="Llama-3.1-8B",
    gpu="H100-SXM",
    max_model_len=8192,
    prompt_tokens=512,
    output_tokens=128,
)


def test_at_low_load_the_simulation_agrees_with_the_closed_form() -> None:
    model = step_model(SCENARIO)
    closed = evaluate(SCENARIO)
    sim = simulate(
        model, poisson_arrivals(0.2, 600, seed=1), prompt_tokens=512, output_tokens=128
    )
    assert sim.requests_completed > 50 and sim.preemptions == 0
    # TTFT ~ prefill time (plus at most one step of waiting at this load).
    assert sim.ttft_p50_ms == pytest.approx(closed.prefill_ms, rel=0.35)
    # ITL within a few % of the closed-form step at the batch the simulation ran.
    expected = model.decode_step_s(max(sim.mean_running_batch, 1.0), 512 + 64) * 1000
    assert sim.itl_p50_ms == pytest.approx(expected, rel=0.05)


def test_ttft_p95_grows_with_load_as_queueing_sets_in() -> None:
    model = step_model(SCENARIO)
    capacity = evaluate(SCENARIO).max_requests_per_s_within_sla
    p95 = []
    for share in (0.2, 0.5, 0.8, 1.1, 1.4):
        sim = simulate(
            model,
            poisson_arrivals(capacity * share, 60, seed=2),
            prompt_tokens=512,
            output_tokens=128,
        )
        p95.append(sim.ttft_p95_ms)
    assert p95 == sorted(p95)
    assert p95[-1] > 5 * p95[0]


def test_a_cache_too_small_for_the_load_preempts() -> None:
    tight = step_model(
        Scenario(
            model="Llama-3.1-8B",
            gpu="L4",
            max_model_len=2048,
            prompt_tokens=1024,
            output_tokens=512,
        )
    )
    sim = simulate(
        tight, poisson_arrivals(4, 60, seed=3), prompt_tokens=1024, output_tokens=512
    )
    assert sim.preemptions > 0
