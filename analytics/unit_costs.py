"""Unit costs: $ per 1k requests and per 1M tokens, from daily cost and traffic.

Pure pandas. A day (or window) below a minimum volume has no unit cost (NaN):
three requests at 4 am are noise, and zero requests never divide anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# A deployment-day with fewer finished requests has no unit cost.
MIN_REQUESTS = 100.0
MIN_TOKENS = 10_000.0

DAY_COLUMNS = ("deployment", "day", "cost", "requests", "tokens")


def per_1k_requests(
    cost: float, requests: float, *, min_requests: float = MIN_REQUESTS
) -> float:
    """$ per 1k finished requests; NaN under the minimum volume."""
    if not requests or requests < max(min_requests, 1e-12):
        return math.nan
    return cost / requests * 1000.0


def per_1m_tokens(
    cost: float, tokens: float, *, min_tokens: float = MIN_TOKENS
) -> float:
    if not tokens or tokens < max(min_tokens, 1e-12):
        return math.nan
    return cost / tokens * 1_000_000.0


def relative_change(current: float, previous: float) -> float:
    """current / previous - 1; NaN when either is missing or previous is 0."""
    if (
        current is None
        or previous is None
        or math.isnan(current)
        or math.isnan(previous)
        or previous == 0
    ):
        return math.nan
    return current / previous - 1.0


def truncation_share(stop: float, length: float) -> float:
    """Share of finished requests cut at max_tokens: length / (stop + length)."""
    total = stop + length
    return length / total if total > 0 else math.nan


def daily_unit_costs(
    days: pd.DataFrame,
    *,
    min_requests: float = MIN_REQUESTS,
    min_tokens: float = MIN_TOKENS,
) -> pd.DataFrame:
    """Add ``cost_per_1k_requests`` and ``cost_per_1m_tokens`` to daily rows.

    ``days`` needs at least the columns ``cost``, ``requests``, ``tokens``.
    """
    out = days.copy()
    cost = out["cost"].astype(float)
    requests = out["requests"].astype(float)
    tokens = out["tokens"].astype(float)
    ok_r = requests >= max(min_requests, 1e-12)
    ok_t = tokens >= max(min_tokens, 1e-12)
    out["cost_per_1k_requests"] = np.where(
        ok_r, cost / requests.where(ok_r, 1.0) * 1000.0, np.nan
    )
    out["cost_per_1m_tokens"] = np.where(
        ok_t, cost / tokens.where(ok_t, 1.0) * 1_000_000.0, np.nan
    )
    return out


@dataclass(frozen=True)
class WindowTotals:
    cost: float
    requests: float
    tokens: float
    cost_per_1k_requests: float
    cost_per_1m_tokens: float


def window_totals(
    days: pd.DataFrame,
    *,
    min_requests: float = MIN_REQUESTS,
    min_tokens: float = MIN_TOKENS,
) -> WindowTotals:
    """Totals over all rows; unit costs are ratios of sums, not means of ratios."""
    cost = float(days["cost"].astype(float).sum()) if len(days) else 0.0
    requests = float(days["requests"].astype(float).sum()) if len(days) else 0.0
    tokens = float(days["tokens"].astype(float).sum()) if len(days) else 0.0
    return WindowTotals(
        cost,
        requests,
        tokens,
        per_1k_requests(cost, requests, min_requests=min_requests),
        per_1m_tokens(cost, tokens, min_tokens=min_tokens),
    )


def totals_by_deployment(
    days: pd.DataFrame,
    *,
    sum_columns: tuple[str, ...] = ("cost", "requests", "tokens"),
    min_requests: float = MIN_REQUESTS,
    min_tokens: float = MIN_TOKENS,
) -> pd.DataFrame:
    """Sum ``sum_columns`` per deployment and add unit costs of the sums."""
    if days.empty:
        columns = ["deployment", *sum_columns]
        return daily_unit_costs(
            pd.DataFrame({c: pd.Series(dtype=float) for c in columns}),
            min_requests=min_requests,
            min_tokens=min_tokens,
        )
    grouped = (
        days.assign(**{c: days[c].astype(float) for c in sum_columns})
        .groupby("deployment", as_index=False)[list(sum_columns)]
        .sum()
    )
    return daily_unit_costs(grouped, min_requests=min_requests, min_tokens=min_tokens)
