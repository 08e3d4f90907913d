"""Class and sentence for each flagged period, from its LMDI parts and bands.

A flagged period (``flag`` from ``analytics.baselines``) gets a cause:

- ``cost``: price or fleet drove the move (a cost anomaly). Also whenever the
  price or the GPU-hours are themselves outside their own band in the
  direction of the move, whatever else moved: "traffic +10%, cost +50%" is a
  cost anomaly hidden in traffic, not a traffic change;
- ``traffic``: the traffic part is the largest contribution in the direction
  of the move while price and fleet stay in their bands (a holiday dip, a
  launch): not an anomaly;
- ``size``: tokens per request moved the most, price and fleet in band.

"Largest contribution in the direction of the move" compares ``cost``
(price + fleet), ``traffic`` and ``size`` signed by the direction of
``u - u_baseline``, so a part pushing the other way never wins. Without
GPU-hours there is no price or fleet band and the class rests on the parts
alone; without tokens there is no size part (the cause is cost or traffic).

The sentence names what moved, with the numbers it moved between, e.g.
"$/1k requests 0.288 → 0.432 (+50%): GPU-hours 144 → 216 (+50%) at unchanged
traffic" or "$/1k requests 1.00 → 1.39 (+39%): requests \N{MINUS SIGN}28%, fleet
unchanged: holiday dip".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analytics.lmdi import lmdi

CAUSES = ("cost", "traffic", "size")


def _num(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def explain(
    frame: pd.DataFrame,
    *,
    band_k: float = 2.5,
    unchanged: float = 0.05,
    sentences: bool = True,
) -> pd.DataFrame:
    """Parts, cause and sentence per row (cause and sentence only where flagged).

    ``frame`` columns: ``cost, gpu_hours, tokens, requests`` and their
    baselines ``cost_b, gpu_hours_b, tokens_b, requests_b`` (``gpu_hours`` and
    ``tokens`` may be absent or NaN), ``flag`` (bool), ``sigma_price`` and
    ``sigma_fleet`` (from ``baselines_compute``; absent means no band test),
    and optionally ``holiday`` (bool), ``sigma`` (of ln u: the cost's noise
    where GPU-hours are unknown), ``replicas`` and ``replicas_b``.
    ``unchanged`` is the relative move under which a series is "unchanged"
    in the sentence.

    Returns the ``analytics.lmdi.lmdi`` columns plus ``cause`` ("" where not
    flagged) and ``sentence`` (all "" with ``sentences=False``: the text is a
    Python loop over flagged rows, which a caller that only needs the class
    can skip).
    """
    parts = lmdi(frame)
    flag = (
        frame["flag"].fillna(False).astype(bool).to_numpy()
        if "flag" in frame.columns
        else np.zeros(len(frame), dtype=bool)
    )
    ok = flag & (parts["reason"] == "").to_numpy()
    direction = np.sign(parts["delta"].to_numpy(float))

    with np.errstate(divide="ignore", invalid="ignore"):
        ln_price = np.log(
            (_num(frame, "cost") / _num(frame, "gpu_hours"))
            / (_num(frame, "cost_b") / _num(frame, "gpu_hours_b"))
        )
        ln_fleet = np.log(_num(frame, "gpu_hours") / _num(frame, "gpu_hours_b"))
    sig_p = _num(frame, "sigma_price")
    sig_f = _num(frame, "sigma_fleet")
    price_out = (np.abs(ln_price) > band_k * sig_p) & (np.sign(ln_price) == direction)
    fleet_out = (np.abs(ln_fleet) > band_k * sig_f) & (np.sign(ln_fleet) == direction)
    override = np.nan_to_num(price_out, nan=0).astype(bool) | np.nan_to_num(
        fleet_out, nan=0
    ).astype(bool)

    contrib = (
        np.vstack(
            [
                parts["cost"].to_numpy(float),
                parts["traffic"].to_numpy(float),
                parts["size"].to_numpy(float),
            ]
        )
        * direction[None, :]
    )
    contrib = np.where(np.isnan(contrib), -np.inf, contrib)
    winner = np.asarray(CAUSES, dtype=object)[np.argmax(contrib, axis=0)]
    cause = np.where(override, "cost", winner)
    holiday = (
        frame["holiday"].fillna(False).astype(bool).to_numpy()
        if "holiday" in frame.columns
        else np.zeros(len(frame), dtype=bool)
    )
    # A declared holiday explains a move its traffic drove: traffic pushes
    # the way u moved and the cost itself (price x fleet) did not follow. A
    # pool whose fixed bill spreads over fewer GPU-hours is that case (price
    # up, fleet down, cost unchanged); a cost rise on a holiday is not.
    # "Did not follow": within ``unchanged`` or the cost's own noise (band_k
    # of its sigmas: price and fleet together, or the unit cost's where
    # GPU-hours are unknown), so a noisy series' holiday is not a cost anomaly
    # on a day its cost wobbled by the noise the band already allows.
    with np.errstate(divide="ignore", invalid="ignore"):
        ln_cost = np.log(_num(frame, "cost") / _num(frame, "cost_b")) * direction
        noise = np.sqrt(sig_p**2 + sig_f**2)
        noise = np.where(np.isfinite(noise), noise, _num(frame, "sigma"))
    allowed = np.fmax(math.log1p(unchanged), np.nan_to_num(band_k * noise, nan=0.0))
    cost_still = np.nan_to_num(ln_cost, nan=np.inf) <= allowed
    holiday_dip = holiday & (contrib[1] > 0) & cost_still
    cause = np.where(holiday_dip, "traffic", cause)
    out = parts.copy()
    out["cause"] = np.where(ok, cause, "")

    text_col = np.full(len(frame), "", dtype=object)
    cols = {
        name: _num(frame, name)
        for name in (
            "cost", "gpu_hours", "tokens", "requests", "cost_b", "gpu_hours_b",
            "tokens_b", "requests_b", "replicas", "replicas_b",
        )
    }  # fmt: skip
    # Only flagged rows get a sentence: a Python loop over them, on plain
    # lists (row access through pandas would cost more than the sentence).
    idx = np.flatnonzero(flag) if sentences else np.zeros(0, dtype=int)
    names = list(cols)
    values = [cols[k][idx].tolist() for k in names]
    reasons = parts["reason"].to_numpy()[idx].tolist()
    causes = out["cause"].to_numpy()[idx].tolist()
    u_list = parts["u"].to_numpy(float)[idx].tolist()
    ub_list = parts["u_b"].to_numpy(float)[idx].tolist()
    hol_list = holiday[idx].tolist()
    ok_list = ok[idx].tolist()
    texts = []
    for j in range(len(idx)):
        if not ok_list[j]:
            texts.append(str(reasons[j]))
            continue
        row = {k: values[n][j] for n, k in enumerate(names)}
        texts.append(
            _sentence(causes[j], u_list[j], ub_list[j], row, hol_list[j], unchanged)
        )
    text_col[idx] = texts
    out["sentence"] = text_col
    return out


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "?"
    ax = abs(x)
    if ax >= 100 or x.is_integer():
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def _count(x: float) -> str:
    """A replica count: whole where it is (within 0.05), else one decimal
    (a day's mean of an autoscaled deployment)."""
    if abs(x - round(x)) < 0.05:
        return f"{round(x):,d}"
    return f"{x:,.1f}"


def _pct(new: float, old: float) -> str:
    change = new / old - 1.0
    text = f"{change:+.0%}"
    return text.replace("-", "\N{MINUS SIGN}")


def _moved(new: float, old: float, unchanged: float) -> bool:
    return bool(
        math.isfinite(new)
        and math.isfinite(old)
        and old > 0
        and abs(new / old - 1) > unchanged
    )


def _sentence(
    cause: str,
    u: float,
    ub: float,
    row: dict[str, Any],
    holiday: bool,
    unchanged: float,
) -> str:
    head = f"$/1k requests {_fmt(ub)} → {_fmt(u)} ({_pct(u, ub)})"
    g, gb = row["gpu_hours"], row["gpu_hours_b"]
    c, cb = row["cost"], row["cost_b"]
    t, tb = row["tokens"], row["tokens_b"]
    r, rb = row["requests"], row["requests_b"]
    traffic_new, traffic_old, traffic_name = (
        (t, tb, "tokens")
        if math.isfinite(t) and math.isfinite(tb)
        else (r, rb, "requests")
    )
    traffic_moved = _moved(traffic_new, traffic_old, unchanged)
    at_traffic = (
        f"at {traffic_name} {_pct(traffic_new, traffic_old)}"
        if traffic_moved
        else "at unchanged traffic"
    )
    have_g = math.isfinite(g) and math.isfinite(gb) and gb > 0
    if cause == "cost":
        bits: list[str] = []
        if math.isfinite(row["replicas"]) and math.isfinite(row["replicas_b"]):
            rep, rep_b = _count(row["replicas"]), _count(row["replicas_b"])
            if rep != rep_b:
                bits.append(f"replicas {rep_b} → {rep}")
        if have_g and _moved(g, gb, unchanged):
            bits.append(f"GPU-hours {_fmt(gb)} → {_fmt(g)} ({_pct(g, gb)})")
        if have_g and _moved(c / g, cb / gb, unchanged):
            bits.append(
                f"$/GPU-hour {_fmt(cb / gb)} → {_fmt(c / g)} ({_pct(c / g, cb / gb)})"
            )
        if not bits:
            bits.append(f"cost {_fmt(cb)} → {_fmt(c)} ({_pct(c, cb)})")
        return f"{head}: {', '.join(bits)} {at_traffic}"
    if cause == "traffic":
        moved = f"requests {_pct(r, rb)}"
        if traffic_name == "tokens":
            moved += f" (tokens {_pct(t, tb)})"
        if have_g:
            fleet = (
                f"GPU-hours {_pct(g, gb)}"
                if _moved(g, gb, unchanged)
                else "fleet unchanged"
            )
        else:
            fleet = (
                f"cost {_pct(c, cb)}" if _moved(c, cb, unchanged) else "cost unchanged"
            )
        tail = ": holiday dip" if holiday and traffic_new < traffic_old else ""
        return f"{head}: {moved}, {fleet}{tail}"
    size_new, size_old = t / r, tb / rb
    return (
        f"{head}: tokens per request {_fmt(size_old)} → {_fmt(size_new)} "
        f"({_pct(size_new, size_old)}), price and fleet in band"
    )
