"""Every evaluated column names what limits its batch (issue 26: "a cliff
explains itself")."""

from __future__ import annotations

import itertools
import math

from analytics.capacity.binding import BINDING
from analytics.capacity.engine import Scenario, evaluate, evaluate_grid


def _limit(**changes: object) -> str:
    return evaluate(Scenario(model="Llama-3.1-8B", gpu="H100-SXM", **changes)).binding  # type: ignore[arg-type]


def test_each_limit_is_named_where_it_binds() -> None:
    assert _limit(max_num_seqs=4) == "max_num_seqs"
    # A loose ITL target and long requests: the pool runs out first.
    assert _limit(itl_sla_ms=500, prompt_tokens=8000, output_tokens=50) == "kv_capacity"
    # A tight ITL target at short contexts: the step is weight reads.
    assert (
        _limit(itl_sla_ms=10, prompt_tokens=64, output_tokens=512) == "memory_bandwidth"
    )
    # Not served: the reason is the limit.
    assert _limit(itl_sla_ms=1) == "itl_sla"


def test_the_batch_sits_on_the_limit_it_names() -> None:
    rows = [
        dict(model="Llama-3.1-8B", gpu=gpu, kv_dtype=kv, itl_sla_ms=sla,
             prompt_tokens=prompt, output_tokens=out, max_num_seqs=seqs)
        for gpu, kv, sla, prompt, out, seqs in itertools.product(
            ("H100-SXM", "L4", "A100-80GB"), ("auto", "fp8"), (15, 50, 400),
            (128, 2000, 16000), (32, 512), (None, 64),
        )
    ]  # fmt: skip
    grid = evaluate_grid(rows)
    seen = set()
    for _, r in grid.iterrows():
        seen.add(r["binding"])
        if not r["feasible"]:
            # The refusal or unmet SLA, as a code (``reason`` is its text).
            assert r["binding"] not in BINDING and r["binding"]
            continue
        assert r["binding"] in BINDING
        if r["binding"] == "max_num_seqs":
            assert r["batch_size"] == r["max_num_seqs"]
        if r["binding"] == "kv_capacity":
            assert r["batch_size"] == math.floor(r["max_concurrency"])
            assert r["batch_size"] < r["max_num_seqs"]
    assert {"kv_capacity", "max_num_seqs", "memory_bandwidth"} <= seen
