"""Known price changes: what the bill and the rate card say moved the price.

The baselines learn a price from the series' own history, so a price that
moves for a known reason (a rate card's effective date, a savings plan's or
reserved instance's discount starting or ending, a new effective rate)
would otherwise be
judged against the old price: a discount as a fall to check for days, an
expiry as a cost anomaly for two weeks. Two kinds of known events reach
``analytics.baselines`` as columns of its frame:

- ``price_change`` (text: the cause, "" for none): a lasting change effective
  from the row's day. On that day, before the day is judged, the cost part
  of every slot of the series is rescaled by the change the day itself
  measures (``measured_ratio``: its price per GPU-hour against the
  baseline's, or its unit cost where GPU-hours are unknown), so the day and
  the days after are judged against the new price. A change smaller than
  ``price_min`` (in ln; an effective rate that barely moved) does nothing. The
  day is flagged ``price`` once, with its cause, where the change is beyond
  the price's own noise (``band_k`` of its sigmas; a change within it
  rescales silently); an incident on the same day is still judged against
  the rescaled baseline and flagged as usual.
- ``price_lump`` (text) with ``price_lump_amount`` (its signed sum): a one-off
  amount on that day (a credit, a refund, a monthly fee) that is not a new
  price: the day is held out of the baseline and out of the sustained
  detector's sums, and if it left the band in the lump's direction it is
  flagged ``price`` with the line named instead of as a saving or anomaly.

A ``price`` day pages only a rule that asks for it (``condition: price``,
``analytics.alert_rules``), once: the flag is on one day.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PRICE = "price"


def text_column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A text column as strings ("" where absent or missing)."""
    if name not in frame.columns:
        return np.full(len(frame), "", dtype=object)
    return frame[name].fillna("").astype(str).to_numpy(object)


def price_residual(base: np.ndarray, x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per series, ``ln`` of the day's price against the baseline's (NaN:
    nothing to measure): ``(sum cost / sum GPU-hours) / (sum cost_b / sum
    GPU-hours_b)`` over the day's periods with both, so only the price moves
    it (not the fleet or the traffic); without GPU-hours, the same with
    requests (the unit cost). ``base`` and ``x`` are (part, period, series)
    with parts cost, requests, GPU-hours, tokens: the slots' state and the
    day's values."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = valid & np.isfinite(base[0]) & (base[0] > 0)
        by_gpu = ok & (x[2] > 0) & (base[2] > 0)
        use_gpu = by_gpu.any(axis=0)
        pick = np.where(use_gpu[None, :], by_gpu, ok & (base[1] > 0))
        per = np.where(use_gpu[None, :], x[2], x[1])
        per_b = np.where(use_gpu[None, :], base[2], base[1])
        return np.log(
            np.where(pick, x[0], 0.0).sum(0) / np.where(pick, per, 0.0).sum(0)
        ) - np.log(
            np.where(pick, base[0], 0.0).sum(0) / np.where(pick, per_b, 0.0).sum(0)
        )


def measured_ratio(
    residual: np.ndarray, known: np.ndarray, min_change: float
) -> np.ndarray:
    """The change a known event's day measures (``exp`` of its
    ``price_residual``), NaN where there is no event, nothing to measure or a
    change under ``min_change``."""
    apply = known & np.isfinite(residual) & (np.abs(residual) >= min_change)
    return np.where(apply, np.exp(residual), np.nan)


def settle_step(
    state: dict[str, np.ndarray], residual: np.ndarray, used: np.ndarray,
    days: int,
) -> np.ndarray:  # fmt: skip
    """The rescale of the days after a known change, in place on ``state``
    (``price_n``: days measured since the change, 0 when settled;
    ``price_sum``: their residuals; ``price_fix``: the correction applied).

    One day's price carries its own noise into the new baseline (at 3-6%
    noise that paged as often again in the weeks after). Each of the next
    ``days`` days with a price (``used``), before it is judged, moves the
    change to the mean of every day measured since it, the change's day
    included (its residual counts as 0: it was rescaled onto it); a holiday
    or a one-off amount is no evidence of the price (not ``used``). The
    caller clips each residual, so an incident in that week moves the
    baseline by little. Returns the factor to apply to the cost part of
    every slot (1 where nothing moves)."""
    n, total, fix = state["price_n"], state["price_sum"], state["price_fix"]
    step = (n > 0) & used & np.isfinite(residual)
    total += np.where(step, residual, 0.0)
    n += step
    target = np.where(step, total / np.where(n > 0, n, 1.0), fix)
    scale = np.exp(target - fix)
    fix[:] = target
    done = n >= days + 1
    for arr in (n, total, fix):
        arr[done] = 0.0
    return scale


def first_of_day(frame: pd.DataFrame, keys: list[str], time: str,
                 rows: np.ndarray) -> np.ndarray:  # fmt: skip
    """Of the ``rows`` (a boolean mask), the first of each series and UTC
    day: an hourly series' known change is told once, on its first hour."""
    if not rows.any():
        return rows
    day = pd.to_datetime(frame[time], utc=True).dt.floor("D")
    picked = frame.loc[rows, keys].assign(_day=day[rows].to_numpy())
    first = ~picked.duplicated(keep="first").to_numpy()
    out = np.zeros(len(frame), dtype=bool)
    out[np.flatnonzero(rows)[first]] = True
    return out


def change_sentence(cause: str, before: float, after: float) -> str:
    """ "<cause>: $/1k requests 0.412 → 0.330 (-20%), the baseline's price
    rescaled from this day"."""
    if not (np.isfinite(before) and np.isfinite(after)) or before <= 0:
        return f"{cause}: the baseline's price rescaled from this day"
    pct = (after / before - 1.0) * 100.0
    sign = "+" if pct >= 0 else "\N{MINUS SIGN}"
    return (
        f"{cause}: $/1k requests {before:.3g} \N{RIGHTWARDS ARROW} {after:.3g} "
        f"({sign}{abs(pct):.0f}%), the baseline's price rescaled from this day"
    )


def lump_sentence(lump: str, sentence: str) -> str:
    """A lump day's sentence: the line first, then what the parts say."""
    return f"{lump}, a one-off amount not learnt as the price; {sentence}"


def known_rows(
    frame: pd.DataFrame, base: pd.DataFrame, keys: list[str], time: str,
    flagged: np.ndarray, *, min_change: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Which rows are told as a known ``price`` day: (the first unflagged,
    judged row of each day whose known change moved the price by more than
    ``band_k`` of its sigmas, the flagged rows of a lump that moved the way
    the lump did)."""
    ratio = base["price_ratio"].to_numpy(float)
    u = base["u"].to_numpy(float)
    # Told only where the change is beyond the price's own noise (its band's
    # sigma; the unit cost's where GPU-hours are unknown): a change within it
    # rescales the baseline silently.
    with np.errstate(invalid="ignore", divide="ignore"):
        beyond = np.abs(np.log(ratio)) >= min_change
    judged = base["warm"].to_numpy(bool) & base["volume_ok"].to_numpy(bool)
    change = first_of_day(
        frame, keys, time, np.isfinite(ratio) & beyond & judged & ~flagged
    )
    amount = (
        pd.to_numeric(frame["price_lump_amount"], errors="coerce").to_numpy(float)
        if "price_lump_amount" in frame.columns
        else np.full(len(frame), np.nan)
    )
    with np.errstate(invalid="ignore"):
        moved = np.sign(u - base["baseline"].to_numpy(float))
        same_way = ~np.isfinite(amount) | (np.sign(amount) == moved)
    lump = flagged & base["lump"].to_numpy(bool) & same_way
    return change, lump


def old_price(rows: pd.DataFrame, ratio: np.ndarray) -> pd.DataFrame:
    """Explanation rows against the baseline before the change: its cost
    part divided back by the ratio applied on the day."""
    out = rows.copy()
    out["cost_b"] = out["cost_b"].to_numpy(float) / ratio
    out["flag"] = True
    return out
