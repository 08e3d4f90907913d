"""Two clocks: the provisional cost (measured GPU-hours x a rate) and the bill.

The bill is the truth but late. Until a day's bill arrives, the day (and every
hour) is priced provisionally. Once final bill days exist, the provisional
clock uses the *effective rate* those days showed,

    effective_rate = sum(bill) / sum(measured GPU-hours)

over the series' last ``lookback_days`` final days before the period, and the
rate card only where no final day exists yet (labelled ``rate_card``). So a
day does not look anomalous only because it switched clocks: the rate card
may be 18% above what the bill really charges, the effective rate is not.

A series is whatever the caller prices as one: a deployment, or a pool (pass
the pool name as the series to learn one rate per pool).

``clock`` of each figure: ``final`` (final bill), ``estimated`` (a bill still
marked Estimated), ``provisional`` (no bill: GPU-hours x rate).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

CLOCKS = ("final", "estimated", "provisional")
# From the least to the most settled: a sum of periods is as settled as its
# least settled part (its "worst clock").
CLOCK_ORDER = {"provisional": 0, "estimated": 1, "final": 2}
RATE_SOURCES = ("bill", "effective", "rate_card", "none")


def _require(frame: pd.DataFrame, names: Sequence[str]) -> None:
    for name in names:
        if name not in frame.columns:
            raise InvalidInput(name, None, "column is required")


def effective_rates(
    days: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    lookback_days: int = 7,
) -> pd.DataFrame:
    """The effective rate of each series as learnt from its final bill days.

    ``days`` columns: ``keys``, ``day`` (UTC midnight), ``bill_cost``,
    ``gpu_hours`` (measured), ``bill_status`` (``final`` / ``estimated`` /
    empty). Only final days with positive GPU-hours and a bill teach the rate.

    Returns ``keys, as_of, effective_rate, rate_days``: from ``as_of`` (the
    day after a final day) on, the rate of the last ``lookback_days`` final
    days up to it.
    """
    keys = list(keys)
    _require(days, [*keys, "day", "bill_cost", "gpu_hours", "bill_status"])
    final = days[
        (days["bill_status"] == "final")
        & days["bill_cost"].notna()
        & (pd.to_numeric(days["gpu_hours"], errors="coerce") > 0)
    ].sort_values([*keys, "day"])
    if final.empty:
        return pd.DataFrame(
            {
                **{k: pd.Series(dtype=object) for k in keys},
                "as_of": pd.Series(dtype="datetime64[ns]"),
                "effective_rate": pd.Series(dtype=float),
                "rate_days": pd.Series(dtype="int64"),
            }
        )
    grouped = final.groupby(keys, sort=False)
    bill = grouped["bill_cost"].rolling(lookback_days, min_periods=1).sum()
    gpu = grouped["gpu_hours"].rolling(lookback_days, min_periods=1).sum()
    n = grouped["gpu_hours"].rolling(lookback_days, min_periods=1).count()
    out = final[keys].copy()
    out["as_of"] = pd.DatetimeIndex(final["day"]) + pd.Timedelta(days=1)
    out["effective_rate"] = bill.to_numpy(float) / gpu.to_numpy(float)
    out["rate_days"] = n.to_numpy().astype("int64")
    return out.reset_index(drop=True)


def clock_costs(
    periods: pd.DataFrame,
    rates: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    time: str = "period_start",
) -> pd.DataFrame:
    """Cost of each period on the best clock available, and where it came from.

    ``periods`` columns: ``keys``, ``time`` (UTC period start; hours or days),
    ``gpu_hours`` (measured; NaN where telemetry is missing), ``rate_card``
    ($ per GPU-hour, dated by the caller), and for days optionally
    ``bill_cost`` and ``bill_status``. ``rates`` is ``effective_rates(...)``.

    Returns a frame on the same index: ``cost``, ``clock``, ``rate_source``
    (``bill`` / ``effective`` / ``rate_card`` / ``none``), ``rate`` (the $ per
    GPU-hour used, or the bill's own for billed days), ``list_cost``
    (GPU-hours x rate card) and ``effective_rate`` (the learnt rate, NaN when
    none), so the gap between list price, effective rate and bill can be
    shown. Missing GPU-hours leave a provisional period's cost missing, never 0.
    """
    keys = list(keys)
    _require(periods, [*keys, time, "gpu_hours", "rate_card"])
    gpu = pd.to_numeric(periods["gpu_hours"], errors="coerce").to_numpy(float)
    card = pd.to_numeric(periods["rate_card"], errors="coerce").to_numpy(float)
    stamps = pd.DatetimeIndex(pd.to_datetime(periods[time], utc=True)).tz_convert(None)

    learnt = np.full(len(periods), np.nan)
    if len(rates) and len(periods):
        left = periods[keys].copy()
        left["_t"] = stamps
        left["_row"] = np.arange(len(periods))
        left = left.sort_values("_t")
        right = rates.copy()
        right["_t"] = pd.DatetimeIndex(right["as_of"])
        right = right.sort_values("_t")
        merged = pd.merge_asof(
            left, right[[*keys, "_t", "effective_rate"]], on="_t", by=keys,
            direction="backward",
        )  # fmt: skip
        learnt[merged["_row"].to_numpy()] = merged["effective_rate"].to_numpy(float)

    status = (
        periods["bill_status"].fillna("").astype(str).to_numpy()
        if "bill_status" in periods.columns
        else np.full(len(periods), "", dtype=object)
    )
    bill = (
        pd.to_numeric(periods["bill_cost"], errors="coerce").to_numpy(float)
        if "bill_cost" in periods.columns
        else np.full(len(periods), np.nan)
    )
    billed = np.isin(status, ["final", "estimated"]) & np.isfinite(bill)
    use_learnt = ~billed & np.isfinite(learnt)
    use_card = ~billed & ~use_learnt & np.isfinite(card)
    rate = np.where(use_learnt, learnt, np.where(use_card, card, np.nan))
    provisional = rate * gpu  # NaN where GPU-hours or any rate is missing
    with np.errstate(divide="ignore", invalid="ignore"):
        bill_rate = np.where(gpu > 0, bill / gpu, np.nan)

    out = pd.DataFrame(index=periods.index)
    out["cost"] = np.where(billed, bill, provisional)
    out["clock"] = np.where(billed, status, "provisional")
    out["rate_source"] = np.select(
        [billed, use_learnt, use_card], ["bill", "effective", "rate_card"], "none"
    )
    out["rate"] = np.where(billed, bill_rate, rate)
    out["list_cost"] = card * gpu
    out["effective_rate"] = learnt
    return out
