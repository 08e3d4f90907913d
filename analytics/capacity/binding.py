"""What limits a replica's batch, so a cliff in a what-if explains itself.

The engine picks the largest batch within the ITL SLA that the KV pool and
``max_num_seqs`` admit. The batch stops at the pool or at ``max_num_seqs``
when it reaches them; otherwise the SLA stopped it, and what makes the step
long at that batch says which resource to buy: memory bandwidth (weights and
KV cache read every step), compute, the fixed per-step overhead, or prefill
chunks of new requests sharing the step.
"""

from __future__ import annotations

import numpy as np

# Code -> what a tech lead reads.
BINDING = {
    "kv_capacity": "KV cache: the pool holds no more requests of this shape",
    "max_num_seqs": "max_num_seqs: the scheduler runs no more requests at once",
    "memory_bandwidth": "ITL SLA, at a step spent reading weights and KV cache "
    "(memory bandwidth)",
    "compute": "ITL SLA, at a step spent computing (compute)",
    "overhead": "ITL SLA, at a step that is mostly fixed overhead (launches, "
    "all-reduce)",
    "prefill": "ITL SLA, at a step stretched by prefill chunks of new requests",
}

# The same, in a word or two for tight cells.
BINDING_SHORT = {
    "kv_capacity": "KV cache",
    "max_num_seqs": "max_num_seqs",
    "memory_bandwidth": "SLA at memory bandwidth",
    "compute": "SLA at compute",
    "overhead": "SLA at step overhead",
    "prefill": "SLA at prefill",
}


def binding(
    *,
    reason: np.ndarray,
    batch: np.ndarray,
    cap: np.ndarray,
    max_num_seqs: np.ndarray,
    kv_seqs: np.ndarray,
    overhead: np.ndarray,
    memory: np.ndarray,
    compute: np.ndarray,
    prefill: np.ndarray,
) -> np.ndarray:
    """One code per row: the refusal or unmet SLA (``reason``) where the row
    does not serve, else the limit the chosen batch sits on."""
    at_cap = (batch >= cap) & (cap >= 1)
    seqs_first = max_num_seqs <= np.floor(np.maximum(kv_seqs, 0.0))
    parts = np.stack([memory, compute, overhead, np.maximum(prefill, 0.0)])
    step = np.array(["memory_bandwidth", "compute", "overhead", "prefill"])[
        np.argmax(parts, axis=0)
    ]
    out = np.where(at_cap, np.where(seqs_first, "max_num_seqs", "kv_capacity"), step)
    return np.where(reason != "", reason, out).astype(object)
