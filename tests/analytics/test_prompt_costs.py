"""The prefill estimate: $ per computed prompt token and the prefix cache's saving."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.prompt_costs import (
    PHASE_FROM_HISTOGRAMS,
    PHASE_FROM_TTFT,
    prefill_decode_seconds,
    prompt_economy,
    prompt_tokens,
)


def split_only(**kw: float) -> dict[str, float]:
    base = dict(
        split_prompt=0.0, split_computed=0.0, split_cache_hit=0.0,
        split_transferred=0.0, split_hours=0, hits_prompt=0.0, hits=0.0,
        hits_hours=0, hours_unknown=0,
    )  # fmt: skip
    return {**base, **kw}


def test_by_source_skipped_tokens_leave_out_the_recomputed_last_token() -> None:
    # 10 prompts of 100 tokens fully cached locally: vLLM counts 10 computed
    # (each last token again) and 1,000 hits; 990 were not computed.
    t = prompt_tokens(
        **split_only(
            split_prompt=1000,
            split_computed=10,
            split_cache_hit=1000,
            split_transferred=0,
            split_hours=1,
        )
    )
    assert t.basis == "by_source"
    assert (t.computed, t.cache_hit, t.skipped_locally) == (10, 1000, 990)


def test_transferred_tokens_are_not_a_local_saving() -> None:
    t = prompt_tokens(
        **split_only(
            split_prompt=1000,
            split_computed=200,
            split_cache_hit=300,
            split_transferred=500,
            split_hours=2,
        )
    )
    assert t.skipped_locally == 300 and t.transferred == 500


def test_without_the_split_hits_stand_for_the_cache_and_transfers_are_unknown() -> None:
    t = prompt_tokens(**split_only(hits_prompt=1000, hits=250, hits_hours=3))
    assert t.basis == "prefix_cache_hits"
    assert (t.computed, t.skipped_locally) == (750, 250)
    assert math.isnan(t.transferred)


def test_the_estimate_prices_prefill_over_computed_tokens() -> None:
    t = prompt_tokens(**split_only(hits_prompt=4e6, hits=3e6, hits_hours=24))
    e = prompt_economy(
        cost=100.0, prefill_s=300.0, decode_s=700.0, share_source="x", tokens=t
    )
    assert e.prefill_share == pytest.approx(0.3)
    assert e.prefill_cost == pytest.approx(30.0)
    assert e.cost_per_1m_computed == pytest.approx(30.0)  # $30 over 1M computed
    assert e.saved == pytest.approx(90.0)  # 3M tokens at $30 per 1M
    assert e.missing == ""


@pytest.mark.parametrize(
    ("tokens", "cost", "prefill_s", "why"),
    [
        (split_only(), 10.0, 1.0, "neither prompt sources nor prefix-cache hits"),
        (
            split_only(hits_prompt=10, hits=1, hits_hours=2, hours_unknown=1),
            10.0,
            1.0,
            "not measured on 1 of 3 hours",
        ),
        (split_only(hits_prompt=10, hits=1, hits_hours=2), math.nan, 1.0, "no cost"),
        (split_only(hits_prompt=10, hits=1, hits_hours=2), 10.0, 0.0, "no prefill"),
        (split_only(hits_prompt=10, hits=10, hits_hours=2), 10.0, 1.0, "no prompt"),
    ],
)
def test_a_figure_that_cannot_be_worked_out_is_missing_with_its_reason(
    tokens: dict[str, float], cost: float, prefill_s: float, why: str
) -> None:
    e = prompt_economy(
        cost=cost,
        prefill_s=prefill_s,
        decode_s=0.0,
        share_source="",
        tokens=prompt_tokens(**tokens),
    )
    assert why in e.missing
    assert math.isnan(e.cost_per_1m_computed) and math.isnan(e.saved)


@given(
    cost=st.floats(0.01, 1e6),
    share=st.floats(0.01, 0.99),
    computed=st.floats(1.0, 1e9),
    skipped=st.floats(0.0, 1e9),
)
def test_prefill_cost_is_what_computed_tokens_cost_and_saving_scales_with_it(
    cost: float, share: float, computed: float, skipped: float
) -> None:
    t = prompt_tokens(
        **split_only(hits_prompt=computed + skipped, hits=skipped, hits_hours=1)
    )
    e = prompt_economy(
        cost=cost,
        prefill_s=share,
        decode_s=1 - share,
        share_source="",
        tokens=t,
    )
    assert e.cost_per_1m_computed * t.computed / 1e6 == pytest.approx(e.prefill_cost)
    assert e.prefill_cost <= cost * (1 + 1e-12)
    assert e.saved == pytest.approx(e.prefill_cost * t.skipped_locally / t.computed)


def test_engine_time_comes_from_prefill_and_decode_histograms_first() -> None:
    both = {"prefill": 2.0, "decode": 8.0, "ttft": 5.0, "e2e": 9.0}
    assert prefill_decode_seconds(both) == (2.0, 8.0, PHASE_FROM_HISTOGRAMS)
    assert prefill_decode_seconds({"ttft": 5.0, "e2e": 9.0}) == (
        5.0,
        4.0,
        PHASE_FROM_TTFT,
    )
    assert prefill_decode_seconds({"ttft": 5.0}) is None
