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


# --- The full set of unit figures (issue 9) -----------------------------------

MIG_SLICES_PER_GPU = 7


def _num(frame: pd.DataFrame, name: str) -> pd.Series:
    if name not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce").astype(float)


def _arr(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def measured_gpu_hours(frame: pd.DataFrame) -> pd.Series:
    """GPU-hours a deployment measured: replica-hours x GPUs per replica, and a
    MIG instance's share of its GPU (compute slices / 7).

    ``frame`` columns: ``replica_hours`` (hours replicas were up, from
    telemetry), ``gpus_per_replica``, optional ``mig_slices`` (NaN or 0 for a
    whole GPU). Missing telemetry stays missing (NaN), never 0.
    """
    slices = _num(frame, "mig_slices")
    share = np.where(slices > 0, slices / MIG_SLICES_PER_GPU, 1.0)
    return _num(frame, "replica_hours") * _num(frame, "gpus_per_replica") * share


def unit_costs(
    frame: pd.DataFrame,
    *,
    min_requests: float = MIN_REQUESTS,
    min_tokens: float = MIN_TOKENS,
) -> pd.DataFrame:
    """Every unit figure of a period, vectorised over rows (any grain).

    ``frame`` columns: ``cost`` and ``requests`` (finished: stop + length);
    optional ``tokens`` (else prompt + generation), ``prompt_tokens``,
    ``generation_tokens``, ``gpu_hours`` (measured), ``prefill_seconds`` and
    ``decode_seconds`` (summed request phase times), ``clock``.

    Returns on the same index: ``cost_per_1k_requests``, ``cost_per_1m_tokens``,
    ``prompt_cost_share`` and ``prompt_rule`` (see docs/unit-costs.md: ``time``
    splits the cost by prefill vs decode seconds where both are known,
    ``tokens`` by token counts otherwise), ``cost_per_1m_prompt_tokens``,
    ``cost_per_1m_generation_tokens``, ``cost_per_gpu_hour``,
    ``tokens_per_gpu_second`` and ``clock`` (passed through; "" if absent).
    Every figure is NaN where its inputs are missing or under the minimum
    volume: zero requests give no figure, not an infinite one.
    """
    cost = _arr(frame, "cost")
    requests = _arr(frame, "requests")
    prompt = _arr(frame, "prompt_tokens")
    gen = _arr(frame, "generation_tokens")
    tokens = _arr(frame, "tokens")
    tokens = np.where(np.isnan(tokens), prompt + gen, tokens)
    gpu = _arr(frame, "gpu_hours")
    phases = _arr(frame, "prefill_seconds") + _arr(frame, "decode_seconds")
    prefill = _arr(frame, "prefill_seconds")
    pg = prompt + gen

    with np.errstate(divide="ignore", invalid="ignore"):

        def per(
            amount: np.ndarray, volume: np.ndarray, floor: float, scale: float
        ) -> np.ndarray:
            # Divide only where the volume counts, into a NaN-filled result:
            # no full-size temporaries for the quotient and the mask's where.
            out = np.full(len(volume), np.nan)
            np.divide(amount, volume, out=out, where=volume >= max(floor, 1e-12))
            out *= scale
            return out

        by_time = phases > 0
        by_tokens = ~by_time & (pg > 0)
        share = np.where(
            by_time, prefill / phases, np.where(by_tokens, prompt / pg, np.nan)
        )
        columns = {
            "cost_per_1k_requests": per(cost, requests, min_requests, 1000.0),
            "cost_per_1m_tokens": per(cost, tokens, min_tokens, 1e6),
            "prompt_cost_share": share,
            # Categorical: three labels for a million rows cost codes, not strings.
            "prompt_rule": pd.Categorical.from_codes(
                np.select([by_time, by_tokens], [1, 2], 0),
                categories=["", "time", "tokens"],
            ),
            "cost_per_1m_prompt_tokens": per(cost * share, prompt, min_tokens, 1e6),
            "cost_per_1m_generation_tokens": per(
                cost * (1 - share), gen, min_tokens, 1e6
            ),
            "cost_per_gpu_hour": np.where(gpu > 0, cost / gpu, np.nan),
            "tokens_per_gpu_second": np.where(gpu > 0, tokens / (gpu * 3600.0), np.nan),
        }
    out = pd.DataFrame(columns, index=frame.index, copy=False)
    out["clock"] = (
        frame["clock"].fillna("").astype(str)
        if "clock" in frame.columns
        else pd.Categorical.from_codes(
            np.zeros(len(frame), dtype=np.int8), categories=[""]
        )
    )
    return out


def period_of(stamps: pd.Series | pd.DatetimeIndex, grain: str) -> pd.DatetimeIndex:
    """The start of each stamp's week (Monday, UTC) or calendar month."""
    days = pd.DatetimeIndex(stamps).normalize()
    if grain == "week":
        return days - pd.to_timedelta(days.weekday, unit="D")
    if grain == "month":
        return days - pd.to_timedelta(days.day - 1, unit="D")
    raise ValueError(f"grain {grain!r}: week or month")


def rollup(
    frame: pd.DataFrame,
    *,
    keys: list[str],
    grain: str,
    summed: list[str],
    time: str = "period_start",
) -> pd.DataFrame:
    """Day rows summed into weeks or months per series (``keys``).

    A sum with one missing day is missing (an unknown cost is not a zero
    cost): a week has a cost only if every one of its days has one. Returns
    ``keys``, ``time`` (the period's start), the ``summed`` columns and
    ``days`` (how many day rows the period holds; a week still running has
    fewer than 7).
    """
    period = period_of(frame[time], grain)
    by = [frame[k] for k in keys] + [pd.Series(period, index=frame.index, name=time)]
    values = frame[summed].apply(pd.to_numeric, errors="coerce").astype(float)
    grouped = values.groupby(by, sort=True)
    sums = grouped.sum().mask(values.isna().groupby(by, sort=True).any())
    sums["days"] = grouped.size()
    return sums.reset_index()
