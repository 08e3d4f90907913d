"""A deployment's prompt tokens by source over a window, and what they cost.

Reads the stored hours' sums (no Python loop over hours) and hands them to
``analytics.prompt_costs``, which holds the estimate and its rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Sum

from analytics.prompt_costs import (
    PromptEconomy,
    prefill_decode_seconds,
    prompt_economy,
    prompt_tokens,
)
from costapp import formatting as fmt
from costapp.models import Deployment, DeploymentHour, HistogramHour

PHASE_METRICS = ("prefill", "decode", "ttft", "e2e")

BASIS_LABELS = {
    "by_source": "the engine's prompt tokens by source",
    "prefix_cache_hits": "prefix-cache hits (this engine does not split prompt "
    "tokens by source; transfers not reported)",
    "mixed": "prompt tokens by source where the engine reported them, "
    "prefix-cache hits on the other hours",
}


def prompt_economy_read(
    deployment: Deployment, *, start: datetime, end: datetime, cost: float
) -> PromptEconomy:
    """Hours in [start, end); ``cost``: the deployment's cost over those days."""
    hours = DeploymentHour.objects.filter(
        deployment=deployment, hour__gte=start, hour__lt=end
    )
    split = Q(prompt_tokens_computed__isnull=False)
    hit = Q(prompt_tokens_computed__isnull=True, prefix_cache_hits__isnull=False)
    unknown = Q(
        prompt_tokens_computed__isnull=True,
        prefix_cache_hits__isnull=True,
        prompt_tokens__gt=0,
    )
    sums = hours.aggregate(
        split_prompt=Sum("prompt_tokens", filter=split, default=0.0),
        split_computed=Sum("prompt_tokens_computed", filter=split, default=0.0),
        split_cache_hit=Sum("prompt_tokens_cache_hit", filter=split, default=0.0),
        split_transferred=Sum("prompt_tokens_transferred", filter=split, default=0.0),
        split_hours=Count("pk", filter=split),
        hits_prompt=Sum("prompt_tokens", filter=hit, default=0.0),
        hits=Sum("prefix_cache_hits", filter=hit, default=0.0),
        hits_hours=Count("pk", filter=hit),
        hours_unknown=Count("pk", filter=unknown),
    )
    seconds = {
        row["metric"]: float(row["seconds"])
        for row in HistogramHour.objects.filter(
            deployment=deployment,
            hour__gte=start,
            hour__lt=end,
            metric__in=PHASE_METRICS,
            total_count__gt=0,
        )
        .values("metric")
        .annotate(seconds=Sum("total_sum"))
    }
    parts = prefill_decode_seconds(seconds)
    prefill_s, decode_s, source = parts if parts else (0.0, 0.0, "")
    return prompt_economy(
        cost=cost,
        prefill_s=prefill_s,
        decode_s=max(decode_s, 0.0),
        share_source=source,
        tokens=prompt_tokens(**sums),
    )


def prompt_economy_card(e: PromptEconomy, currency: str) -> dict[str, Any]:
    """What the deployment page shows of it, as text."""
    t = e.tokens

    def tokens(value: float) -> str:
        return fmt.count_short(value, "tokens")

    def share(value: float) -> str:
        return fmt.percent(value / t.prompt) if t.prompt > 0 else fmt.MISSING

    return {
        "basis": BASIS_LABELS.get(t.basis, ""),
        "currency": currency,
        "prompt": tokens(t.prompt),
        "computed": tokens(t.computed),
        "computed_share": share(t.computed),
        "cache_hit": tokens(t.cache_hit),
        "cache_hit_share": share(t.cache_hit),
        "transferred": tokens(t.transferred),
        "transferred_share": share(t.transferred),
        "skipped": tokens(t.skipped_locally),
        "prefill_share": fmt.percent(e.prefill_share),
        "share_source": e.share_source,
        "prefill_cost": fmt.money(e.prefill_cost, currency),
        "per_1m_computed": fmt.money_unit(e.cost_per_1m_computed, currency),
        "per_1m_computed_raw": repr(e.cost_per_1m_computed),
        "saved": fmt.money(e.saved, currency),
        "saved_raw": repr(e.saved),
        "missing": e.missing,
        "hours": t.hours,
    }
