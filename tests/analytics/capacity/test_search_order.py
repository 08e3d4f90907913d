"""The configuration search's ranking states its tie rule and keeps it."""

from __future__ import annotations

import pandas as pd

from analytics.capacity.search import ranked_order


def test_equal_scores_are_ordered_by_the_stated_rule_not_evaluation_order() -> None:
    frame = pd.DataFrame(
        {
            "score": [1.0, 1.0, 1.0, 1.0, 0.5],
            "cost_per_1k_requests": [1.0, 1.0, 1.0, 0.9, 2.0],
            "p95_latency_s": [3.0, 3.0, 2.0, 9.0, 9.0],
            "gpus_needed": [4.0, 4.0, 4.0, 4.0, 4.0],
            "max_num_seqs": [256, 64, 128, 512, 8],
            "mig_profile": [None, None, "3g.40gb", None, None],
        }
    )
    ordered = ranked_order(frame, ["max_num_seqs", "mig_profile"])
    # Score, then $ per 1k, then p95 latency, then the settings (64 before 256).
    assert list(ordered["max_num_seqs"]) == [8, 512, 128, 64, 256]
    shuffled = ranked_order(
        frame.iloc[[3, 1, 4, 0, 2]], ["max_num_seqs", "mig_profile"]
    )
    assert shuffled.equals(ordered)
