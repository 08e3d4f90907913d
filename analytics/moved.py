"""What moved between two periods: sums of a series' daily figures over a
period and the one before it, the change in $ per 1k requests and in spend,
and their parts, exact with no residual.

The $ per 1k change is split by ``analytics.lmdi.lmdi`` into ``price``,
``fleet``, ``traffic`` and ``size``. A ``clock`` part is added where the two
periods rest on different clocks (one has provisional days the other has
billed, or the reverse): the price per GPU-hour is written

    P = C / G = (L / G) * (C / L)

with L the period's rate-card cost (GPU-hours x the dated rate card, the same
on every clock). Where the clocks differ the change of C / L (bill or
effective rate against the rate card) cannot be told apart from the clock
switch, so it is the ``clock`` part and ``price`` keeps the rate card's own
change; where they are the same, ``clock`` is 0 and the whole price change is
``price`` (a discount on the bill is a price). Where the rate-card cost is
unknown on either side and the clocks differ, ``price`` and ``clock`` are NaN
(``cost``, their sum with ``fleet``, stays exact).

Spend is C = P * G, so its change has only ``price``, ``fleet`` and ``clock``
parts, with the weight L(C1, C0) (the same LMDI on the spend identity).

A period's sums are over its days with both a cost and requests: a day
missing either is left out of both sides of its ratio and counted as
``days_missing``. Where a counted day lacks GPU-hours (or tokens, or the rate
card's cost) the period's sum of it is NaN, never a partial sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput
from analytics.lmdi import BASELINE_SUFFIX, lmdi, logmean

KEYS = ("scope", "name", "currency")
SUMMED = ("cost", "requests", "gpu_hours", "tokens", "list_cost")
PARTS = ("price", "fleet", "traffic", "size", "clock")
SPEND_PARTS = ("spend_price", "spend_fleet", "spend_clock")
# Columns a table of moves may be sorted by ("-" before one: descending).
SORTABLE = (
    "scope", "name", "spend", "spend_b", "spend_change", "u", "u_b", "change",
    *PARTS,
)  # fmt: skip


def previous_period(start: date, end: date) -> tuple[date, date]:
    """The period of the same length immediately before ``[start, end)``."""
    days = (end - start).days
    if days <= 0:
        raise InvalidInput("end", end.isoformat(), f"must be after start {start}")
    return start - timedelta(days=days), start


def period_sums(days: pd.DataFrame, *, keys: Sequence[str] = KEYS) -> pd.DataFrame:
    """One row per ``keys``: the sums of ``SUMMED`` over the counted days,
    ``days`` (counted), ``days_missing`` and ``clocks`` (the clocks of the
    counted days, sorted and joined by "+").

    ``days`` has one row per series and day: ``keys``, ``clock`` and the
    columns of ``SUMMED`` (NaN where not measured; ``tokens`` and
    ``list_cost`` may be absent)."""
    keys = list(keys)
    f = days.copy()
    for name in SUMMED:
        f[name] = f[name].astype(float) if name in f.columns else np.nan
    counted = f["cost"].notna() & f["requests"].notna()
    f["_counted"] = counted.astype(int)
    f["_missing"] = (~counted).astype(int)
    used = f[counted]
    grouped = f.groupby(keys, sort=True)
    out = grouped[["_counted", "_missing"]].sum()
    out.columns = ["days", "days_missing"]
    ugroups = used.groupby(keys, sort=True)
    sums = ugroups[list(SUMMED)].sum(min_count=1)
    # A counted day without the quantity makes the period's sum unknown.
    unknown = used[list(SUMMED)].isna().groupby([used[k] for k in keys]).any()
    sums = sums.mask(unknown.reindex(sums.index).fillna(True).astype(bool))
    out = out.join(sums, how="left")
    clocks = ugroups["clock"].agg(lambda c: "+".join(sorted(set(c))))
    out["clocks"] = clocks.reindex(out.index).fillna("")
    return out.reset_index()


def moved(
    now: pd.DataFrame, before: pd.DataFrame, *, keys: Sequence[str] = KEYS
) -> pd.DataFrame:
    """The change of each series between two periods' sums (``period_sums``
    frames). A series in only one period has no change (``reason`` says
    which side is missing).

    Returns one row per ``keys`` with ``spend``, ``spend_b``,
    ``spend_change``, ``u``, ``u_b``, ``change``, the ``PARTS`` and
    ``SPEND_PARTS``, ``cost`` (price + fleet + clock), ``clocks``,
    ``clocks_b``, ``days``, ``days_b``, ``days_missing``,
    ``days_missing_b`` and ``reason`` ("" when decomposed)."""
    keys = list(keys)
    left = now.set_index(keys)
    right = before.set_index(keys).add_suffix(BASELINE_SUFFIX)
    f = left.join(right, how="outer")
    for name in (*SUMMED, "days", "days_missing"):
        for col in (name, name + BASELINE_SUFFIX):
            if col not in f.columns:
                f[col] = np.nan
            f[col] = f[col].astype(float)
    for col in ("clocks", "clocks" + BASELINE_SUFFIX):
        f[col] = f[col].fillna("") if col in f.columns else ""
    parts = lmdi(f)
    out = pd.DataFrame(index=f.index)
    out["spend"] = f["cost"]
    out["spend_b"] = f["cost_b"]
    out["spend_change"] = f["cost"] - f["cost_b"]
    out["u"], out["u_b"], out["change"] = parts["u"], parts["u_b"], parts["delta"]
    ok = (parts["reason"] == "").to_numpy()
    differ = (f["clocks"] != f["clocks_b"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(ok, logmean(np.where(ok, parts["u"], 1.0),
                                      np.where(ok, parts["u_b"], 1.0)), np.nan)  # fmt: skip
        ln_k = np.log(
            (f["cost"] / f["list_cost"]).to_numpy(float)
            / (f["cost_b"] / f["list_cost_b"]).to_numpy(float)
        )
        ln_c = np.log((f["cost"] / f["cost_b"]).to_numpy(float))
        ln_g = np.log((f["gpu_hours"] / f["gpu_hours_b"]).to_numpy(float))
        spend_ok = (f["cost"] > 0).to_numpy() & (f["cost_b"] > 0).to_numpy()
        spend_w = np.where(
            spend_ok,
            logmean(np.where(spend_ok, f["cost"], 1.0),
                    np.where(spend_ok, f["cost_b"], 1.0)),
            np.nan,
        )  # fmt: skip
    has_k = np.isfinite(ln_k)
    # Same clocks: no clock part; different clocks: the bill's own move.
    clock_log = np.where(differ, np.where(has_k, ln_k, np.nan), 0.0)
    out["clock"] = np.where(ok, weight * clock_log, np.nan)
    out["price"] = parts["price"] - out["clock"]
    out["fleet"] = parts["fleet"]
    out["traffic"] = parts["traffic"]
    out["size"] = parts["size"]
    out["cost"] = parts["cost"]
    has_g = np.isfinite(ln_g)
    out["spend_clock"] = np.where(spend_ok, spend_w * clock_log, np.nan)
    out["spend_fleet"] = np.where(spend_ok & has_g, spend_w * ln_g, np.nan)
    out["spend_price"] = (
        np.where(spend_ok & has_g, spend_w * (ln_c - ln_g), np.nan) - out["spend_clock"]
    )
    out["clocks"], out["clocks_b"] = f["clocks"], f["clocks_b"]
    for name in ("days", "days_missing"):
        out[name] = f[name].fillna(0).astype(int)
        out[name + "_b"] = f[name + BASELINE_SUFFIX].fillna(0).astype(int)
    reason = parts["reason"].copy()
    reason = reason.mask(
        f["days_b"].fillna(0) == 0, "no figures in the previous period"
    )
    reason = reason.mask(f["days"].fillna(0) == 0, "no figures in the period")
    out["reason"] = reason
    return out.reset_index()


def moved_sorted(frame: pd.DataFrame, sort: str) -> pd.DataFrame:
    """``frame`` sorted by one of ``SORTABLE`` ("-" first: descending);
    missing values last either way."""
    column = sort[1:] if sort.startswith("-") else sort
    if column not in SORTABLE:
        raise InvalidInput(
            "sort",
            sort,
            "not a column; one of " + ", ".join(SORTABLE) + " (- first: descending)",
        )
    return frame.sort_values(
        [column, "scope", "name"],
        ascending=[not sort.startswith("-"), True, True],
        na_position="last",
        kind="stable",
    ).reset_index(drop=True)
