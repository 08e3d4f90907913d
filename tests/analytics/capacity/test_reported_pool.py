"""A scenario that carries the pool the running engine reported
(``num_gpu_blocks_override``, vLLM's ``--num-gpu-blocks-override``) runs on
exactly that pool, and a change to what the pool was profiled with hands the
sizing back to the memory model."""

from __future__ import annotations

import itertools

import pytest

from analytics.capacity.engine import Scenario, evaluate, evaluate_grid
from analytics.errors import InvalidInput
from costapp.capacity.adapters import POOL_INPUTS, scenario_changed

BASE = Scenario(model="Llama-3.1-8B", gpu="A100-80GB", mig_profile="2g.20gb")


def test_a_reported_pool_is_never_exceeded_whatever_else_is_set() -> None:
    rows = [
        dict(
            model="Llama-3.1-8B",
            gpu=gpu,
            kv_dtype=kv,
            gpu_memory_utilization=util,
            max_num_seqs=seqs,
            block_size=block,
            num_gpu_blocks_override=blocks,
            max_model_len=2048,
        )
        for gpu, kv, util, seqs, block, blocks in itertools.product(
            ("A100-80GB", "H100-SXM", "L4"),
            ("auto", "fp8"),
            (0.5, 0.9, 0.95),
            (None, 8, 512),
            (16, 32),
            (200, 1340, 90_000),
        )
    ]
    grid = evaluate_grid(rows)
    for row, blocks, tokens in zip(
        rows, grid["num_gpu_blocks"], grid["kv_cache_tokens"], strict=True
    ):
        assert blocks == row["num_gpu_blocks_override"]
        assert tokens == row["num_gpu_blocks_override"] * row["block_size"]


def test_the_model_would_refuse_today_and_the_reported_pool_admits_what_it_holds() -> (
    None
):
    # The model's maximum (131,072) needs 8,192 blocks; a 1,340-block pool
    # admits 21,440 tokens, which is what vLLM's own estimate reports.
    held = scenario_changed(BASE, {"num_gpu_blocks_override": 1340})
    refused = evaluate(held)
    assert refused.refusal == "max_model_len_exceeds_pool"
    assert refused.max_model_len_admitted == 1340 * 16
    fits = evaluate(scenario_changed(held, {"max_model_len": 21_440}))
    assert fits.starts and fits.feasible and fits.num_gpu_blocks == 1340


@pytest.mark.parametrize("value", [0, -3, 2.5])
def test_a_pool_of_no_blocks_or_a_fraction_is_refused_naming_the_field(
    value: float,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        evaluate(scenario_changed(BASE, {"num_gpu_blocks_override": value}))
    assert refused.value.field == "num_gpu_blocks_override"


def test_a_variant_keeps_the_reported_pool_only_while_its_profile_is_unchanged() -> (
    None
):
    today = scenario_changed(BASE, {"num_gpu_blocks_override": 1340})
    for traffic in ({"target_requests_per_s": 3.0}, {"max_model_len": 8192},
                    {"itl_sla_ms": 30.0}, {"kv_dtype": today.kv_dtype}):  # fmt: skip
        assert scenario_changed(today, traffic).num_gpu_blocks_override == 1340
    for pool in ({"kv_dtype": "fp8"}, {"gpu_memory_utilization": 0.8},
                 {"gpu": "H100-SXM"}, {"tp": 2}, {"max_num_seqs": 64}):  # fmt: skip
        assert set(pool) <= POOL_INPUTS
        assert scenario_changed(today, pool).num_gpu_blocks_override is None
