"""Engine series we recognise and do not store: no hourly field fits them yet.

Each is declared with its kind (never taken from the scrape's ``# TYPE``) and
its meaning, so that it is written down once and never read by accident under
a stored field. The tables in ``engines.py`` hold them apart from the stored
names: they are not queried from Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Declared:
    kind: Literal["counter", "gauge", "histogram"]
    meaning: str
    releases: str


VLLM_BY_SOURCE = "late 2025 / 2026 releases (vllm-project/vllm#33290)"

VLLM_DECLARED: dict[str, Declared] = {
    # vllm:prompt_tokens_by_source_total is stored (engines.py), not declared.
    # Already includes external (KV-connector) hits: never add it to
    # local_cache_hit.
    "vllm:prompt_tokens_cached_total": Declared(
        "counter",
        "cached prompt tokens, local + external (one less for a request whose "
        "prompt was fully cached: its last token is computed again)",
        VLLM_BY_SOURCE,
    ),
    "vllm:external_prefix_cache_queries_total": Declared(
        "counter", "KV-connector prefix cache queries, in tokens", "0.11+"
    ),
    "vllm:external_prefix_cache_hits_total": Declared(
        "counter", "KV-connector prefix cache hits, in tokens", "0.11+"
    ),
    "vllm:request_prefill_kv_computed_tokens_sum": Declared(
        "counter",
        "histogram sum: prompt tokens computed in prefill, cached ones excluded",
        "December 2025+ (vllm-project/vllm#30189)",
    ),
}

# Under both spellings, sglang: and sglang_ (engines.py).
SGLANG_REALTIME_TOKENS = Declared(
    "counter",
    "tokens by mode{prefill_compute|prefill_cache|decode}, updated on each log "
    "interval; not stored (prefix-cache hits come from cached_tokens_total)",
    "2026 (SchedulerMetricsCollector)",
)
