"""Idle in dollars, both kinds.

1. *Paid but unused*: GPU-hours paid for that no replica used. For pools this
   is the pool's ``__idle__`` share of the allocated bill
   (``analytics.allocation``); for a deployment outside pools it is its
   billed instance GPU-hours minus its measured GPU-hours, priced at the
   period's own cost per paid GPU-hour (``paid_idle``).
2. *Headroom*: serving replicas running below what the capacity model says
   they could carry within the SLA at a target utilisation (default 70%):
   ``share = 1 - load / (replicas * capacity_per_replica * target)``, clipped
   at 0, times the serving cost (``headroom``). Until the capacity model is
   calibrated for the deployment its capacity is a roofline estimate and the
   figure says so; where the observed load exceeds the predicted capacity the
   model underestimates, and the figure says that instead of claiming
   negative headroom.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analytics.allocation import IDLE
from analytics.errors import InvalidInput

TARGET_UTILISATION = 0.7
UNDERESTIMATES = "model underestimates"


def _num(frame: pd.DataFrame, name: str, *, required: bool = True) -> np.ndarray:
    if name not in frame.columns:
        if required:
            raise InvalidInput(name, None, "column is required")
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def pool_idle(
    shares: pd.DataFrame, *, keys: tuple[str, ...] = ("pool", "day")
) -> pd.DataFrame:
    """Idle dollars per pool and day from allocated shares.

    ``shares`` columns: ``keys``, ``target`` (a deployment, ``__idle__`` or
    ``__unallocated__``) and ``amount`` (float; convert Decimals at the edge).
    Returns ``keys, idle_cost, pool_cost, idle_share``.
    """
    for name in (*keys, "target", "amount"):
        if name not in shares.columns:
            raise InvalidInput(name, None, "column is required")
    f = shares.assign(
        amount=pd.to_numeric(shares["amount"], errors="coerce"),
        _idle=lambda x: np.where(x["target"] == IDLE, x["amount"], 0.0),
    )
    out = f.groupby(list(keys), as_index=False, sort=True).agg(
        idle_cost=("_idle", "sum"), pool_cost=("amount", "sum")
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        out["idle_share"] = np.where(
            out["pool_cost"] > 0, out["idle_cost"] / out["pool_cost"], np.nan
        )
    return out


def paid_idle(frame: pd.DataFrame) -> pd.DataFrame:
    """Idle of deployments outside pools: paid minus measured GPU-hours.

    ``frame`` columns: ``cost`` (the billed cost of the period),
    ``paid_gpu_hours`` (billed instance-hours x GPUs per instance) and
    ``gpu_hours`` (measured; MIG already weighted by slices/7). Returns
    ``idle_gpu_hours`` (clipped at 0: measured above paid is clock skew, not
    negative idle) and ``idle_cost`` on the same index; NaN where an input is
    missing.
    """
    cost = _num(frame, "cost")
    paid = _num(frame, "paid_gpu_hours")
    used = _num(frame, "gpu_hours")
    idle_h = np.clip(paid - used, 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        idle_cost = np.where(
            paid > 0, cost * idle_h / paid, np.where(paid == 0, 0.0, np.nan)
        )
    out = pd.DataFrame(index=frame.index)
    out["idle_gpu_hours"] = idle_h
    out["idle_cost"] = idle_cost
    return out


def headroom(
    frame: pd.DataFrame, *, target_utilisation: float = TARGET_UTILISATION
) -> pd.DataFrame:
    """Headroom dollars of serving replicas.

    ``frame`` columns: ``cost`` (serving cost of the period, idle excluded),
    ``replicas`` (mean serving replicas), ``load`` (observed requests/s),
    ``capacity_per_replica`` (requests/s one replica carries within the SLA,
    from the capacity model), ``calibrated`` (bool: the capacity model is
    calibrated for this deployment), and optionally ``target_utilisation``
    per row (overrides the keyword).

    Returns on the same index: ``needed_replicas`` (load / (capacity x
    target)), ``headroom_share`` (clipped to [0, 1]), ``headroom_cost``,
    ``estimate`` (``calibrated`` or ``roofline``) and ``note`` (``model
    underestimates`` where load > replicas x capacity, else "").
    """
    if not 0 < target_utilisation <= 1:
        raise InvalidInput(
            "target_utilisation", target_utilisation, "must be in (0, 1]"
        )
    cost = _num(frame, "cost")
    replicas = _num(frame, "replicas")
    load = _num(frame, "load")
    cap = _num(frame, "capacity_per_replica")
    target = _num(frame, "target_utilisation", required=False)
    target = np.where(np.isfinite(target), target, target_utilisation)
    if ((target <= 0) | (target > 1)).any():
        bad = target[(target <= 0) | (target > 1)][0]
        raise InvalidInput("target_utilisation", float(bad), "must be in (0, 1]")
    calibrated = (
        frame["calibrated"].fillna(False).astype(bool).to_numpy()
        if "calibrated" in frame.columns
        else np.zeros(len(frame), dtype=bool)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        usable = replicas * cap * target
        share = np.where(usable > 0, np.clip(1.0 - load / usable, 0.0, 1.0), np.nan)
        needed = np.where(cap > 0, load / (cap * target), np.nan)
    # The load is above what the model says the replicas carry at all: the
    # model is wrong (too low), not the fleet short of headroom. No headroom
    # is claimed, and the row says why (also where the model predicts 0).
    under = load > replicas * cap
    share = np.where(under, 0.0, share)
    # No replica up: nothing paid for serving, so no headroom (not unknown).
    share = np.where((replicas == 0) & (load == 0), 0.0, share)
    out = pd.DataFrame(index=frame.index)
    out["needed_replicas"] = needed
    out["headroom_share"] = share
    out["headroom_cost"] = share * cost
    out["estimate"] = np.where(calibrated, "calibrated", "roofline")
    out["note"] = np.where(under, UNDERESTIMATES, "")
    return out


def headroom_days(
    hours: pd.DataFrame,
    *,
    keys: tuple[str, ...] = ("deployment", "day"),
    target_utilisation: float = TARGET_UTILISATION,
    hours_per_day: int = 24,
) -> pd.DataFrame:
    """Headroom GPU-hours per day from hourly rows.

    ``hours`` columns: ``keys``, ``gpu_hours`` (measured that hour, NaN where
    unknown), ``replicas``, ``load`` (finished requests/s over the hour),
    ``capacity_per_replica``, ``calibrated`` and optionally
    ``target_utilisation``. Each hour's headroom share (``headroom``) weighs
    that hour's GPU-hours, so a night at one replica and a peak at six count
    for what each paid.

    Returns ``keys, hours, gpu_hours, headroom_gpu_hours, underestimated_hours,
    estimate, complete``. A day with fewer than ``hours_per_day`` rows or any
    unknown input is not complete and its ``headroom_gpu_hours`` is NaN
    (a scrape gap is not headroom); ``underestimated_hours`` counts hours whose
    load exceeded the predicted capacity, which are left out of the headroom
    (0 there) rather than made negative.
    """
    for name in (*keys, "gpu_hours"):
        if name not in hours.columns:
            raise InvalidInput(name, None, "column is required")
    gpu = _num(hours, "gpu_hours")
    h = headroom(hours.assign(cost=gpu), target_utilisation=target_utilisation)
    f = pd.DataFrame({k: hours[k].to_numpy() for k in keys}, index=hours.index)
    f["gpu_hours"] = gpu
    f["headroom_gpu_hours"] = h["headroom_cost"].to_numpy(float)
    f["under"] = (h["note"] == UNDERESTIMATES).to_numpy()
    f["calibrated"] = (h["estimate"] == "calibrated").to_numpy()
    f["gpu_unknown"] = ~np.isfinite(gpu)
    f["unknown"] = ~np.isfinite(f["headroom_gpu_hours"].to_numpy(float))
    out = f.groupby(list(keys), as_index=False, sort=True).agg(
        hours=("gpu_hours", "size"),
        gpu_hours=("gpu_hours", "sum"),
        headroom_gpu_hours=("headroom_gpu_hours", "sum"),
        underestimated_hours=("under", "sum"),
        calibrated=("calibrated", "all"),
        gpu_unknown=("gpu_unknown", "any"),
        unknown=("unknown", "any"),
    )
    # Complete: every hour of the day has a row with known GPU-seconds (what
    # paid idle needs too); headroom also needs every hour's capacity.
    out["complete"] = (out["hours"] >= hours_per_day) & ~out["gpu_unknown"]
    out["gpu_hours"] = out["gpu_hours"].where(~out["gpu_unknown"])
    out["headroom_gpu_hours"] = out["headroom_gpu_hours"].where(
        out["complete"] & ~out["unknown"]
    )
    out["estimate"] = np.where(out["calibrated"], "calibrated", "roofline")
    # After a scrape gap the counters' jump lands in one hour and looks like a
    # load no replica could carry: an incomplete day flags nothing.
    out["underestimated_hours"] = (
        out["underestimated_hours"].where(out["complete"], 0).astype(int)
    )
    return out.drop(columns=["calibrated", "gpu_unknown", "unknown"])


def at_rate(
    idle_gpu_hours: pd.Series, cost: pd.Series, gpu_hours: pd.Series
) -> pd.Series:
    """Idle GPU-hours in dollars at the period's own cost per GPU-hour
    (``cost / gpu_hours``); NaN where that rate is unknown."""
    idle = pd.to_numeric(idle_gpu_hours, errors="coerce").to_numpy(float)
    c = pd.to_numeric(cost, errors="coerce").to_numpy(float)
    g = pd.to_numeric(gpu_hours, errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(g > 0, c / g, np.nan)
    out = np.where(idle == 0, 0.0, idle * rate)
    return pd.Series(out, index=idle_gpu_hours.index)
