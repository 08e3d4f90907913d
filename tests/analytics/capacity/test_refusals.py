"""What vLLM refuses is refused here too, in vLLM's words (engine, grid, CLI, search)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.capacity import Scenario, evaluate, evaluate_grid, search
from analytics.capacity.errors import Refused
from analytics.capacity.refusals import rejected_share
from analytics.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[3]
BASE = Scenario(
    model="Llama-3.1-8B",  # 32 attention heads, 8 KV heads, 131072 positions
    gpu="H100-SXM",
    max_model_len=8192,
    prompt_tokens=512,
    output_tokens=256,
    itl_sla_ms=50,
    gpu_hour_price=6.88,
    target_requests_per_s=40,
)


def _cli(document: object) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "analytics.capacity"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert "Traceback" not in done.stderr
    return done.returncode, json.loads(done.stdout)


def _doc(scenario: Scenario, **changes: object) -> dict[str, object]:
    doc = {
        "model": scenario.model,
        "gpu": scenario.gpu,
        "max_model_len": scenario.max_model_len,
    }
    doc.update(changes)
    return doc


def test_tp_3_on_a_32_head_model_is_refused_quoting_vllm() -> None:
    with pytest.raises(Refused) as refused:
        evaluate(replace(BASE, tp=3))
    assert refused.value.field == "tp" and refused.value.value == 3
    assert refused.value.code == "tp_heads"
    assert refused.value.reason == (
        "Total number of attention heads (32) must be divisible by tensor parallel "
        "size (3)."
    )
    assert isinstance(refused.value, InvalidInput)


def test_tp_5_is_refused_and_tp_2_is_not() -> None:
    with pytest.raises(Refused, match="divisible by tensor parallel size \\(5\\)"):
        evaluate(replace(BASE, tp=5))
    assert evaluate(replace(BASE, tp=2)).feasible


def test_a_fractional_tp_is_refused_not_divided_by() -> None:
    with pytest.raises(Refused) as refused:
        evaluate(replace(BASE, tp=2.5))  # type: ignore[arg-type]
    assert refused.value.code == "tp_not_integer"
    assert "invalid int value: '2.5'" in refused.value.reason


def test_kv_heads_that_neither_divide_nor_are_divided_by_tp_are_refused() -> None:
    # Qwen2.5-7B: 28 attention heads (divisible by 7), 4 KV heads (7 % 4 != 0).
    with pytest.raises(Refused) as refused:
        evaluate(replace(BASE, model="Qwen2.5-7B", tp=7, max_model_len=4096))
    assert refused.value.code == "tp_kv_heads"
    assert "tp_size % self.total_num_kv_heads == 0" in refused.value.reason


def test_tp_on_mig_is_refused() -> None:
    with pytest.raises(Refused, match="MIG") as refused:
        evaluate(replace(BASE, gpu="A100-80GB", mig_profile="3g.40gb", tp=2))
    assert refused.value.code == "tp_on_mig"


def test_max_model_len_above_the_models_is_refused_unless_the_env_var_allows_it() -> (
    None
):
    with pytest.raises(Refused) as refused:
        evaluate(replace(BASE, max_model_len=200_000))
    assert refused.value.field == "max_model_len"
    assert refused.value.reason.startswith(
        "User-specified max_model_len (200000) is greater than the derived "
        "max_model_len (max_position_embeddings=131072"
    )
    allowed = evaluate(
        replace(BASE, max_model_len=200_000, allow_long_max_model_len=True)
    )
    assert allowed.starts
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in w for w in allowed.warnings)


def test_a_max_model_len_larger_than_the_pool_does_not_start_and_quotes_the_estimate() -> (
    None
):
    # Llama-3.1-8B on an L4 (24 GB) holds far fewer than 131072 tokens of KV.
    result = evaluate(replace(BASE, gpu="L4", max_model_len=131072))
    assert not result.feasible and not result.starts
    assert result.refusal == "max_model_len_exceeds_pool"
    assert result.reason is not None
    assert result.reason.startswith(
        "To serve at least one request with the models's max seq len (131072)"
    )
    # Full attention: the longest sequence that fits is the whole pool.
    assert (
        f"the estimated maximum model length is {result.kv_cache_tokens}."
        in result.reason
    )
    # 131072 tokens x 128 KiB = 16.00 GiB needed.
    assert "(16.00 GiB KV cache is needed" in result.reason


def test_v0_says_it_in_v0_words() -> None:
    result = evaluate(
        replace(BASE, gpu="L4", engine_version="0.6.4", max_model_len=131072)
    )
    assert not result.starts
    assert result.reason is not None
    assert result.reason.startswith("The model's max seq len (131072) is larger than")


def test_no_memory_left_for_kv_does_not_start() -> None:
    result = evaluate(replace(BASE, model="Llama-3.1-70B", gpu="L4"))
    assert not result.starts and result.refusal == "no_kv_memory"
    assert result.replicas == 0


def test_batched_tokens_below_max_num_seqs_is_refused() -> None:
    with pytest.raises(Refused) as refused:
        evaluate(replace(BASE, max_num_seqs=256, max_num_batched_tokens=128))
    assert refused.value.reason == (
        "max_num_batched_tokens (128) must be greater than or equal to "
        "max_num_seqs (256)."
    )


def test_v0_without_chunked_prefill_refuses_batched_tokens_below_max_model_len() -> (
    None
):
    scenario = replace(
        BASE,
        engine_version="0.6.4",
        enable_chunked_prefill=False,
        max_num_batched_tokens=4096,
    )
    with pytest.raises(Refused, match="is smaller than max_model_len \\(8192\\)"):
        evaluate(scenario)
    # V1 always chunks prefill: the same numbers start.
    assert evaluate(replace(scenario, engine_version="0.10.1")).starts


def test_expert_parallel_on_a_dense_model_is_refused() -> None:
    with pytest.raises(Refused, match="Number of experts in the model"):
        evaluate(replace(BASE, enable_expert_parallel=True))


def test_prompts_longer_than_max_model_len_make_every_request_fail() -> None:
    result = evaluate(replace(BASE, max_model_len=16, prompt_tokens=3215))
    assert not result.feasible and result.starts
    assert result.reason is not None and "maximum context length is 16" in result.reason


def test_speculative_decoding_and_lora_are_not_modelled_rather_than_guessed() -> None:
    for flag in ("speculative_decoding", "lora"):
        result = evaluate(replace(BASE, **{flag: True}))
        assert not result.modelled and not result.feasible and result.starts
        assert result.reason is not None and "not modelled" in result.reason


def test_the_grid_keeps_refused_rows_with_vllms_reason_instead_of_raising() -> None:
    grid = evaluate_grid(
        pd.DataFrame(
            {
                "model": ["Llama-3.1-8B"] * 4,
                "gpu": ["H100-SXM"] * 4,
                "tp": [1, 3, 2.5, 2],
                "max_model_len": [8192, 8192, 8192, 8192],
            }
        )
    )
    assert list(grid["starts"]) == [True, False, False, True]
    assert list(grid["refusal"]) == [None, "tp_heads", "tp_not_integer", None]
    assert "attention heads (32)" in grid.loc[1, "reason"]
    # TP 2 halves the weights on each GPU; TP 2.5 is not a TP 2 in disguise.
    assert grid.loc[3, "weights_bytes"] == pytest.approx(
        grid.loc[0, "weights_bytes"] / 2
    )


def test_search_returns_the_hand_checked_optimum_first_and_lists_every_refusal() -> (
    None
):
    space = {"tp": [1, 2, 2.5, 3], "max_model_len": [8192, 10**30]}
    base = replace(BASE, target_requests_per_s=15)
    found = search(space, base=base, objective="cost_per_1k_requests")
    best = found.ranked.iloc[0]
    # Hand check: one H100 at TP 1 serves 15 req/s within the SLA (it serves more
    # than 20), so the optimum costs $6.88 per GPU-hour / (15 x 3600) per request;
    # TP 2 pays for two GPUs for the same 15 req/s.
    assert (
        evaluate(
            replace(base, target_requests_per_s=None)
        ).max_requests_per_s_within_sla
        > 20
    )
    assert (best["tp"], best["max_model_len"]) == (1, 8192)
    assert best["cost_per_1k_requests"] == pytest.approx(6.88 / (15 * 3600) * 1000)
    assert found.ranked.iloc[1]["tp"] == 2
    assert found.ranked.iloc[1]["cost_per_1k_requests"] == pytest.approx(
        2 * 6.88 / (15 * 3600) * 1000
    )
    assert len(found.ranked) == 2  # TP 1 and TP 2 at 8192
    excluded = found.infeasible
    assert len(excluded) == 6
    assert not excluded["starts"].any()
    for _, row in excluded.iterrows():
        assert row["reason"], row.to_dict()
        if row["tp"] in (2.5, 3):
            assert row["refusal"] in {"tp_not_integer", "tp_heads"}
        else:
            assert row["refusal"] == "max_model_len_above_derived"
            assert "is greater than the derived max_model_len" in row["reason"]


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"tp": 3}, "tp_heads"),
        ({"tp": 2.5}, "tp_not_integer"),
        ({"model": "Qwen2.5-7B", "tp": 7, "max_model_len": 4096}, "tp_kv_heads"),
        ({"gpu": "A100-80GB", "mig_profile": "3g.40gb", "tp": 2}, "tp_on_mig"),
        ({"max_model_len": 200_000}, "max_model_len_above_derived"),
        (
            {"max_num_seqs": 256, "max_num_batched_tokens": 128},
            "batched_tokens_below_seqs",
        ),
        (
            {
                "engine_version": "0.6.4",
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": 4096,
            },
            "batched_tokens_below_max_model_len",
        ),
        ({"enable_expert_parallel": True}, "ep_without_experts"),
        ({"model": "Llama-3.1-70B", "gpu": "L4"}, "no_kv_memory"),
        ({"gpu": "L4", "max_model_len": 131072}, "max_model_len_exceeds_pool"),
    ],
)
def test_the_cli_exits_2_with_vllms_reason_for_each_refusal(
    changes: dict[str, object], refusal: str
) -> None:
    code, out = _cli(_doc(BASE, **changes))
    assert code == 2, out
    assert out["refusal"] == refusal
    text = str(out.get("vllm_reason") or out.get("reason"))
    assert text and text != refusal


def test_the_rejected_share_is_bounded_by_the_histogram_edges() -> None:
    # Buckets (0,1024], (1024,4096], (4096,8192], (8192,inf): 50, 30, 15, 5 requests.
    share = rejected_share(
        upper_edges=[1024, 4096, 8192, float("inf")],
        counts=[50, 30, 15, 5],
        max_model_len=2048,
        output_tokens=256,
    )
    assert share is not None
    # Surely rejected: the prompts above 4096 (20%); maybe: also (1024, 4096] (50%).
    assert share.rejected_at_least == pytest.approx(0.20)
    assert share.rejected_at_most == pytest.approx(0.50)
    assert "at least 20.0%, at most 50.0%" in share.message()
    # A limit on an edge is exact: prompts > 4096 only can be >= 4097.
    exact = rejected_share(
        upper_edges=[1024, 4096, 8192, float("inf")],
        counts=[50, 30, 15, 5],
        max_model_len=4097,
    )
    assert exact is not None
    assert exact.rejected_at_least == exact.rejected_at_most == pytest.approx(0.20)


def test_no_requests_gives_no_share_rather_than_zero() -> None:
    assert rejected_share(upper_edges=[1024], counts=[0], max_model_len=16) is None


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(
        ["Llama-3.1-8B", "Qwen2.5-7B", "Qwen2.5-0.5B", "Qwen3-30B-A3B"]
    ),
    tp=st.sampled_from([1, 2, 3, 4, 5, 7, 8, 2.5, 0]),
    max_model_len=st.sampled_from([2048, 32768, 200_000, 10**12]),
)
def test_evaluate_and_the_grid_agree_on_what_vllm_refuses(
    model: str, tp: float, max_model_len: int
) -> None:
    scenario = replace(BASE, model=model, tp=tp, max_model_len=max_model_len)  # type: ignore[arg-type]
    row = evaluate_grid([scenario]).iloc[0]
    try:
        result = evaluate(scenario)
    except Refused as refused:
        # Refused at config time: the grid keeps the row, says it does not start,
        # and quotes the same reason.
        assert not row["starts"] and row["refusal"] == refused.code
        assert row["reason"] == refused.reason
        assert not row["feasible"]
        return
    assert bool(row["starts"]) == result.starts
    assert row["refusal"] == result.refusal
    assert bool(row["feasible"]) == result.feasible
    if result.feasible:
        # Nothing vLLM refuses is ever feasible.
        assert result.starts and float(tp).is_integer() and tp >= 1
