"""Exact LMDI of a change in $ per 1k requests, with no residual.

The identity (PRODUCT.md, "The cost model")::

    u = C / R * 1000 = P * G * (1/T) * (T/R) * 1000

with C cost, G measured GPU-hours, T tokens, R finished requests, P = C / G the
price per GPU-hour. The additive logarithmic mean Divisia index splits
``u1 - u0`` into one part per factor::

    part_k = L(u1, u0) * ln(x_k1 / x_k0),   L(a, b) = (a - b) / (ln a - ln b)

and since the logs of the factors sum to ``ln(u1 / u0)``, the parts sum to
``u1 - u0`` exactly (to float rounding). The parts, in $ per 1k requests:

- ``price``   factor P: the same GPU-hours cost more;
- ``fleet``   factor G: more GPU-hours (replicas, GPUs) were up;
- ``traffic`` factor 1/T: the same fleet served more or fewer tokens (a
  traffic rise makes this part negative: fixed cost spread thinner);
- ``size``    factor T/R: requests got longer or shorter.

``cost`` is ``price + fleet`` (the part that is a cost anomaly); where GPU-hours
are missing it is the only cost part (``price`` and ``fleet`` are NaN, never a
guess). Where tokens are missing, ``traffic`` is the requests term (factor 1/R)
and ``size`` is NaN. Efficiency (G/T) is ``fleet + traffic``.

A change with zero or negative cost or requests on either side has no log and
so no decomposition: every part is NaN and ``reason`` says why.

Team and fleet aggregates (``lmdi_aggregate``) add ``idle`` (idle and
unallocated dollars over deployment dollars) and ``mix`` (requests moving
between cheap and dear deployments), still with no residual.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

PARTS = ("price", "fleet", "traffic", "size")
AGGREGATE_PARTS = (*PARTS, "idle", "mix")
COMPONENTS = ("cost", "gpu_hours", "tokens", "requests")
BASELINE_SUFFIX = "_b"
# Requests in a team's own idle/unallocated rows are ignored; names like these
# (analytics.allocation.IDLE / UNALLOCATED) mark such rows by default.
OVERHEAD_PREFIX = "__"


def logmean(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """L(a, b) = (a - b) / (ln a - ln b), and a where a == b; for a, b > 0.

    Written as b (r - 1) / ln r with r = a / b (ln r by log1p when a and b
    are close, which keeps precision); at r == 1 (to 1e-12) the limit (a + b) / 2.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / b
        # log1p near 1 keeps precision; far from 1, r - 1 would lose r's digits.
        lr = np.where(np.abs(r - 1.0) < 0.5, np.log1p(r - 1.0), np.log(r))
        out = np.where(np.abs(r - 1.0) < 1e-12, (a + b) / 2.0, b * (r - 1.0) / lr)
    return np.asarray(out, dtype=float)


def _log_ratio(x1: pd.Series, x0: pd.Series) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.log(x1.to_numpy(float) / x0.to_numpy(float)))


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return frame[name].astype(float)
    return pd.Series(np.nan, index=frame.index, dtype=float)


def lmdi(frame: pd.DataFrame) -> pd.DataFrame:
    """Decompose ``u - u_b`` row by row, vectorised.

    ``frame`` columns: ``cost``, ``requests`` (required), ``gpu_hours``,
    ``tokens`` (optional, NaN where unknown), and the same four with the
    suffix ``_b`` for the baseline (``cost_b``, ``requests_b`` required).

    Returns a frame on the same index with ``u``, ``u_b``, ``delta``
    (u - u_b), one column per part (``price``, ``fleet``, ``traffic``,
    ``size``, ``cost``) and ``reason`` ("" when decomposed).
    """
    c1, r1 = _col(frame, "cost"), _col(frame, "requests")
    c0, r0 = _col(frame, "cost_b"), _col(frame, "requests_b")
    g1, g0 = _col(frame, "gpu_hours"), _col(frame, "gpu_hours_b")
    t1, t0 = _col(frame, "tokens"), _col(frame, "tokens_b")

    reason = _reasons(c1, r1, c0, r0)
    ok = (reason == "").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        u1 = np.where(r1 > 0, c1 / r1 * 1000.0, np.nan)
        u0 = np.where(r0 > 0, c0 / r0 * 1000.0, np.nan)
    weight = np.where(ok, logmean(np.where(ok, u1, 1.0), np.where(ok, u0, 1.0)), np.nan)

    has_g = ok & (g1 > 0).to_numpy() & (g0 > 0).to_numpy()
    has_t = ok & (t1 > 0).to_numpy() & (t0 > 0).to_numpy()
    ln_c = _log_ratio(c1, c0)
    ln_g = _log_ratio(g1, g0)
    ln_t = _log_ratio(t1, t0)
    ln_r = _log_ratio(r1, r0)

    out = pd.DataFrame(index=frame.index)
    out["u"] = u1
    out["u_b"] = u0
    out["delta"] = u1 - u0
    # P = C/G, so ln P1/P0 = ln C - ln G; 1/T gives -ln T; T/R gives ln T - ln R.
    out["price"] = np.where(has_g, weight * (ln_c - ln_g), np.nan)
    out["fleet"] = np.where(has_g, weight * ln_g, np.nan)
    out["cost"] = np.where(ok, weight * ln_c, np.nan)
    out["traffic"] = np.where(
        has_t, -weight * ln_t, np.where(ok, -weight * ln_r, np.nan)
    )
    out["size"] = np.where(has_t, weight * (ln_t - ln_r), np.nan)
    # Where the change is exactly zero the weight is u itself and every log is
    # 0, so the parts are 0 without special-casing.
    out["reason"] = reason
    return out


def _reasons(c1: pd.Series, r1: pd.Series, c0: pd.Series, r0: pd.Series) -> pd.Series:
    reason = pd.Series("", index=c1.index, dtype=object)
    checks = (
        (c0.isna() | r0.isna(), "no baseline"),
        (c1.isna() | r1.isna(), "cost or requests missing"),
        (r0 <= 0, "baseline has no requests"),
        (c0 <= 0, "baseline cost is zero or negative"),
        (r1 <= 0, "no finished requests"),
        (c1 <= 0, "cost is zero or negative (credits)"),
    )
    # Later checks win: the period's own problem is the more useful message.
    for mask, text in checks:
        reason = reason.mask(mask.to_numpy(), text)
    return reason


def lmdi_aggregate(
    frame: pd.DataFrame,
    *,
    keys: Sequence[str],
    member: str = "deployment",
    overhead: str | None = None,
    baseline_totals: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Fully loaded decomposition for teams or the fleet, with ``idle`` and ``mix``.

    ``frame`` has one row per aggregate (``keys``, e.g. team and day) and
    member (``member``): the member's ``cost, gpu_hours, tokens, requests`` and
    the baseline ``cost_b, gpu_hours_b, tokens_b, requests_b``. Overhead rows
    (pool idle, unallocated) carry only ``cost``/``cost_b``; they are the rows
    where the boolean column ``overhead`` is true, or by default whose member
    name starts with ``__`` (``__idle__``, ``__unallocated__``).

    The aggregate is U = (D + O) / R * 1000 = D' * I with D' the direct
    dollars per 1k requests and I = (D + O) / D the idle factor. D' is a sum
    over members of V_i = C_i / R * 1000 = P_i G_i (1/T_i) (T_i/R_i) (R_i/R)
    * 1000; its LMDI (the sum-of-products form) gives the four factor parts
    and ``mix`` (the share R_i / R). A member present in only one of the two
    periods, or with non-positive cost, cannot be logged: its whole change
    Delta V_i is entry/exit and goes to ``mix``. Members lacking GPU-hours or
    tokens leave ``price``/``fleet`` or ``size`` NaN for the aggregate while
    ``cost`` and the total stay exact.

    ``baseline_totals`` (columns ``keys`` and ``cost_b, gpu_hours_b,
    tokens_b, requests_b``) is the aggregate's own baseline, when it has one
    (a team's series has its own EWMA, with its own held-out days): the
    members' baseline parts are then rescaled, component by component and
    with one factor per aggregate, so that they sum to it. The shares between
    members are kept and the parts sum to ``u`` minus *that* baseline.

    A ``currency`` column, if present, must be one currency per aggregate
    (never add dollars to euros): otherwise ``InvalidInput``.

    Returns one row per ``keys`` with ``u, u_b, delta``, the parts of
    ``AGGREGATE_PARTS``, ``cost`` and ``reason``.
    """
    keys = list(keys)
    if "currency" in frame.columns and "currency" not in keys:
        mixed = frame.groupby(keys, sort=True)["currency"].nunique(dropna=False) > 1
        if mixed.any():
            raise InvalidInput(
                "currency",
                str(mixed[mixed].index[0]),
                "an aggregate would add currencies",
            )
    f = frame.copy()
    for name in (*COMPONENTS, *(c + BASELINE_SUFFIX for c in COMPONENTS)):
        f[name] = _col(f, name)
    if baseline_totals is not None:
        f = _rescale_baselines(f, baseline_totals, keys)
    if overhead is None:
        is_over = f[member].astype(str).str.startswith(OVERHEAD_PREFIX)
    else:
        is_over = f[overhead].astype(bool)
    f["_over"] = is_over.to_numpy()
    direct = f[~f["_over"]]

    sums = direct.groupby(keys, sort=True)[
        ["cost", "requests", "cost_b", "requests_b"]
    ].sum(min_count=1)
    over = f[f["_over"]].groupby(keys, sort=True)[["cost", "cost_b"]].sum()
    over = over.reindex(sums.index).fillna(0.0)
    agg = pd.DataFrame(index=sums.index)
    agg["D1"], agg["D0"] = sums["cost"], sums["cost_b"]
    agg["R1"], agg["R0"] = sums["requests"], sums["requests_b"]
    agg["C1"] = agg["D1"] + over["cost"]
    agg["C0"] = agg["D0"] + over["cost_b"]

    reason = _reasons(agg["C1"], agg["R1"], agg["C0"], agg["R0"])
    reason = reason.mask(
        (reason == "") & ((agg["D1"] <= 0) | (agg["D0"] <= 0)),
        "deployment cost is zero or negative",
    )
    ok = reason == ""
    with np.errstate(divide="ignore", invalid="ignore"):
        U1 = agg["C1"] / agg["R1"] * 1000.0
        U0 = agg["C0"] / agg["R0"] * 1000.0
        Dp1 = agg["D1"] / agg["R1"] * 1000.0
        Dp0 = agg["D0"] / agg["R0"] * 1000.0
        weight_u = logmean(U1.where(ok, 1.0), U0.where(ok, 1.0))
        weight_d = logmean(Dp1.where(ok, 1.0), Dp0.where(ok, 1.0))
        idle = np.where(
            ok, weight_u * np.log(agg["C1"] / agg["C0"] * agg["D0"] / agg["D1"]), np.nan
        )
        # D' parts are scaled by L(U)/L(D') so that, with idle, they sum to dU.
        scale = pd.Series(np.where(ok, weight_u / weight_d, np.nan), index=agg.index)

    # Member level: V_i = C_i / R * 1000 within each aggregate.
    m = direct.join(agg[["R1", "R0"]], on=keys)
    with np.errstate(divide="ignore", invalid="ignore"):
        v1 = m["cost"] / m["R1"] * 1000.0
        v0 = m["cost_b"] / m["R0"] * 1000.0
        loggable = (
            (m["cost"] > 0)
            & (m["cost_b"] > 0)
            & (m["requests"] > 0)
            & (m["requests_b"] > 0)
        ).to_numpy()
        w = np.where(
            loggable, logmean(v1.where(loggable, 1.0), v0.where(loggable, 1.0)), 0.0
        )
        ln_c = _log_ratio(m["cost"], m["cost_b"])
        ln_g = _log_ratio(m["gpu_hours"], m["gpu_hours_b"])
        ln_t = _log_ratio(m["tokens"], m["tokens_b"])
        ln_r = _log_ratio(m["requests"], m["requests_b"])
        ln_share = ln_r - np.log(m["R1"].to_numpy(float) / m["R0"].to_numpy(float))
    has_g = (m["gpu_hours"] > 0) & (m["gpu_hours_b"] > 0)
    has_t = (m["tokens"] > 0) & (m["tokens_b"] > 0)
    # A member missing on one side counts as 0 there: its whole V is entry/exit.
    dv = (v1.fillna(0.0) - v0.fillna(0.0)).to_numpy()
    member_parts = pd.DataFrame(index=m.index)
    member_parts["price"] = np.where(
        loggable, np.where(has_g, w * (ln_c - ln_g), np.nan), 0.0
    )
    member_parts["fleet"] = np.where(loggable, np.where(has_g, w * ln_g, np.nan), 0.0)
    member_parts["cost"] = np.where(loggable, w * ln_c, 0.0)
    member_parts["traffic"] = np.where(
        loggable, np.where(has_t, -w * ln_t, -w * ln_r), 0.0
    )
    member_parts["size"] = np.where(
        loggable, np.where(has_t, w * (ln_t - ln_r), np.nan), 0.0
    )
    member_parts["mix"] = np.where(loggable, w * ln_share, dv)
    for k in keys:
        member_parts[k] = m[k].to_numpy()
    # sum(min_count) would let one NaN member hide; a NaN anywhere makes the
    # aggregate part unknown, which is the honest answer.
    names = ["price", "fleet", "cost", "traffic", "size", "mix"]
    grouped = member_parts.groupby(keys, sort=True)[names]
    summed = grouped.sum().mask(
        member_parts[names]
        .isna()
        .groupby([member_parts[k] for k in keys], sort=True)
        .any()
    )
    summed = summed.reindex(agg.index)

    out = pd.DataFrame(index=agg.index)
    out["u"] = U1.to_numpy()
    out["u_b"] = U0.to_numpy()
    out["delta"] = (U1 - U0).to_numpy()
    for part in ("price", "fleet", "cost", "traffic", "size", "mix"):
        out[part] = (summed[part] * scale).where(ok)
    out["idle"] = idle
    out["reason"] = reason
    return out.reset_index()


def _rescale_baselines(
    f: pd.DataFrame, totals: pd.DataFrame, keys: list[str]
) -> pd.DataFrame:
    """Scale the members' ``*_b`` so that per aggregate they sum to ``totals``."""
    f = f.copy()
    names = [c + BASELINE_SUFFIX for c in COMPONENTS if c + BASELINE_SUFFIX in totals]
    sums = f.groupby(keys, sort=False)[names].sum(min_count=1)
    want = totals.set_index(keys)[names].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = (want / sums.reindex(want.index)).reindex(sums.index)
    scale = f[keys].join(factor, on=keys)
    for name in names:
        # An aggregate without a total keeps its members' own baselines.
        f[name] = f[name] * scale[name].fillna(1.0).to_numpy()
    return f
