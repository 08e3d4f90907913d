from __future__ import annotations

import numpy as np
import pytest

from analytics.capacity import (
    Scenario,
    evaluate,
    poisson_arrivals,
    simulate,
    step_model,
)
from analytics.capacity.latency import StepModel

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


def _two_request_pool(*, prefix_caching: bool) -> StepModel:
    """Decode step 0.02 s at any batch (t0 0.01 + weights 1e10 / 1e12); a prompt
    chunk of T tokens after A already in cache costs ((A + T)^2 - A^2) x 1e-6 s;
    six blocks of four tokens."""
    return StepModel(
        t0_s=0.01,
        bw_eff=1e12,
        decode_flops=1e12,
        prefill_flops=1e12,
        p0_s=0.0,
        dense_bytes=1e10,
        expert_bytes=0.0,
        experts=0.0,
        top_k=0.0,
        kv_bytes_per_token=0.0,
        active_params_per_gpu=0.0,
        attn_coef=1e6,
        num_gpu_blocks=6,
        block_size=4,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        prefix_caching=prefix_caching,
    )


@pytest.mark.parametrize(
    ("prefix_caching", "recompute_s"),
    [(False, 0.01 + 13**2 * 1e-6), (True, 0.01 + (13**2 - 8**2) * 1e-6)],
)
def test_a_preempted_request_recomputes_what_its_cache_lost_and_samples_on_the_way(
    prefix_caching: bool, recompute_s: float
) -> None:
    """Two requests of 8 / 8 in six 4-token blocks, by hand. Step 1 prefills both
    (0.01 + 2 x 64e-6 s, 2 blocks each) and steps 2-5 decode them to 12 tokens
    in 3 blocks each. Step 6 needs a fourth block for each, so the newest is
    preempted (5 tokens generated, 12 in KV; its 3 full blocks go to the free
    queue, last block first) and the other takes one of them (decode, 0.02 s).
    The preempted one can come back only when the other finishes (step 8). Its
    13 tokens are then recomputed in one step, which samples its 6th token
    (vLLM: the step that ends a prefill samples), and two more decode steps end
    it: 11 steps. With prefix caching (vLLM V1's default) its first 2 blocks
    are still cached and only 5 tokens are recomputed, after 8."""
    sim = simulate(
        _two_request_pool(prefix_caching=prefix_caching),
        np.zeros(2),
        prompt_tokens=8,
        output_tokens=8,
    )
    assert sim.requests_completed == 2 and sim.preemptions == 1
    assert sim.steps == 11
    first_prefill = 0.01 + 2 * 64e-6
    assert sim.duration_s == pytest.approx(
        first_prefill + 7 * 0.02 + recompute_s + 2 * 0.02
    )
