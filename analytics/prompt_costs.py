"""What a computed prompt token costs, and what the prefix cache saved.

An estimate, and labelled as one wherever it is shown (docs/costs.md, "Prompt
tokens and the prefix cache"): the deployment's cost over a window, times the
share of engine time spent in prefill, is what its prefill cost; spread over
the prompt tokens it computed, that is the price of a computed prompt token;
applied to the tokens its local prefix cache served instead, the saving.

Where the prompt tokens come from, best first:

* ``by_source``: vLLM's ``prompt_tokens_by_source`` (local_compute,
  local_cache_hit, external_kv_transfer). vLLM counts a fully cached prompt's
  last token both as a hit and as computed (it is recomputed: a forward pass
  needs one input token), so the three add up to the prompt tokens plus one
  per such request. The tokens whose prefill was skipped locally are
  therefore prompt - computed - transferred, not the hit counter.
* ``prefix_cache_hits``: engines without the split (vLLM before it, SGLang's
  cached tokens): computed = prompt - hits; transfers are not reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")

PHASE_FROM_HISTOGRAMS = "prefill and decode time histograms"
PHASE_FROM_TTFT = (
    "prefill/decode histograms not measured: time to first token "
    "(queue + prefill) against the rest of end-to-end time"
)


def prefill_decode_seconds(sums: Mapping[str, T]) -> tuple[T, T, str] | None:
    """Seconds requests spent in prefill and in decode, from the latency
    histograms' sums (scalars or series alike), and where they came from:
    vLLM's prefill and decode time histograms where stored, else the time to
    first token against the rest of end-to-end time (it counts the queue as
    prefill: an upper bound). None when neither pair is there. The second
    part may come out below 0 (the TTFT and end-to-end sums are two
    histograms'): callers clip it."""
    if "prefill" in sums and "decode" in sums:
        return sums["prefill"], sums["decode"], PHASE_FROM_HISTOGRAMS
    if "ttft" in sums and "e2e" in sums:
        first = sums["ttft"]
        return first, sums["e2e"] - first, PHASE_FROM_TTFT  # type: ignore[operator]
    return None


@dataclass(frozen=True)
class PromptTokens:
    """A window's prompt tokens by where they came from. ``hours_unknown``:
    hours with prompt tokens and neither a split nor prefix-cache hits."""

    prompt: float
    computed: float
    cache_hit: float  # as the engine reports them (by_source: see above)
    transferred: float  # NaN: not reported by the engine
    skipped_locally: float  # prefill the local prefix cache saved, in tokens
    basis: Literal["by_source", "prefix_cache_hits", "mixed", ""]
    hours: int
    hours_unknown: int


def prompt_tokens(
    *,
    split_prompt: float,
    split_computed: float,
    split_cache_hit: float,
    split_transferred: float,
    split_hours: int,
    hits_prompt: float,
    hits: float,
    hits_hours: int,
    hours_unknown: int,
) -> PromptTokens:
    """The window's tokens from its hours' sums: ``split_*`` over the hours
    with vLLM's split, ``hits_*`` over the others with prefix-cache hits."""
    basis: Literal["by_source", "prefix_cache_hits", "mixed", ""] = ""
    if split_hours and hits_hours:
        basis = "mixed"
    elif split_hours:
        basis = "by_source"
    elif hits_hours:
        basis = "prefix_cache_hits"
    skipped_split = max(split_prompt - split_computed - split_transferred, 0.0)
    return PromptTokens(
        prompt=split_prompt + hits_prompt,
        computed=split_computed + max(hits_prompt - hits, 0.0),
        cache_hit=split_cache_hit + hits,
        transferred=split_transferred if split_hours else math.nan,
        skipped_locally=skipped_split + min(hits, hits_prompt),
        basis=basis,
        hours=split_hours + hits_hours,
        hours_unknown=hours_unknown,
    )


@dataclass(frozen=True)
class PromptEconomy:
    """Prefill's cost over a window, per computed prompt token, and the
    prefix cache's saving. A figure that could not be worked out is NaN and
    ``missing`` says why."""

    tokens: PromptTokens
    prefill_share: float
    share_source: str
    prefill_cost: float
    cost_per_1m_computed: float
    saved: float
    missing: str = ""


def prompt_economy(
    *, cost: float, prefill_s: float, decode_s: float, share_source: str,
    tokens: PromptTokens,
) -> PromptEconomy:  # fmt: skip
    """The estimate of the module's docstring. ``cost``: the deployment's
    cost over the window the tokens and engine times are summed over."""
    nan = math.nan
    engine_s = prefill_s + decode_s
    share = prefill_s / engine_s if engine_s > 0 else nan

    def missing(why: str) -> PromptEconomy:
        return PromptEconomy(tokens, share, share_source, nan, nan, nan, why)

    if not tokens.hours:
        return missing(
            "the engine reports neither prompt sources nor prefix-cache hits"
        )
    if tokens.hours_unknown:
        return missing(
            f"prompt sources not measured on {tokens.hours_unknown} of "
            f"{tokens.hours + tokens.hours_unknown} hours with prompts"
        )
    if not math.isfinite(cost):
        return missing("no cost for the window")
    if not math.isfinite(share):
        return missing("no prefill or decode time measured")
    if tokens.computed <= 0:
        return missing("no prompt token was computed")
    prefill_cost = cost * share
    per_token = prefill_cost / tokens.computed
    return PromptEconomy(
        tokens=tokens,
        prefill_share=share,
        share_source=share_source,
        prefill_cost=prefill_cost,
        cost_per_1m_computed=per_token * 1e6,
        saved=per_token * tokens.skipped_locally,
    )
