"""The part of a baseline run that decides no flag, for many days at once.

``analytics.baselines`` steps day by day only through what a flag depends on
(slot averages, the sigma of ln u, warm-up counts, held runs). Given that
loop's record of which rows were learnt and where a level shift happened,
this computes the rest in blocks of days: the traffic level that rescales
each day's baseline parts, and the sigmas of ln P, ln G and ln $/token that
the explanations use. Pure numpy, no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analytics.baseline_state import BaselineConfig


def levels_and_sigmas(
    base: np.ndarray,
    learn: np.ndarray,
    shift: np.ndarray,
    R: np.ndarray,
    valid: np.ndarray,
    G: np.ndarray,
    C: np.ndarray,
    T: np.ndarray,
    init: dict[str, np.ndarray],
    cfg: BaselineConfig,
    checkpoints: frozenset[int],
) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
    """What feeds no flag, for many days at once, given the loop's record.

    The traffic level: per series, an EWMA of ln(R / R_slot) over learnt rows
    (reset by a level shift) that rescales the four parts of the day's
    baseline; ``base`` is rescaled in place. The sigmas of ln P, ln G and
    ln $/token against their baselines, from the same learnt rows. Returns
    the level state at each checkpoint day and after the last day, and the
    three sigmas per day with their states at the same days. Blocks of days
    keep the temporaries in cache; only the per-series recurrences (one value
    per series and day) step day by day."""
    n_days, P, N = learn.shape
    av = 0.5 ** (1.0 / (cfg.sigma_halflife_days * P))
    al = 0.5 ** (1.0 / (cfg.level_halflife_days * P))
    wanted = set(checkpoints) | {n_days}
    lvl_num, lvl_w = init["lvl_num"].copy(), init["lvl_w"].copy()
    ss, sw = init["ss"][1:].copy(), init["sw"][1:].copy()
    level: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    ss_at: dict[int, np.ndarray] = {}
    sw_at: dict[int, np.ndarray] = {}
    sig = np.empty((3, n_days, N))
    block = max(1, 16_384 // max(1, P * N // 16))  # about 1 MB per temporary
    for d0 in range(0, n_days, block):
        d1 = min(n_days, d0 + block)
        days = slice(d0, d1)
        lrn, ok = learn[days], valid[days]
        with np.errstate(divide="ignore", invalid="ignore"):
            lnR = np.log(np.where(ok, R[days], np.nan))
            q_lvl = np.where(lrn, lnR - np.log(base[1, days]), 0.0).sum(axis=1)
        m_u = lrn.sum(axis=1)
        dl = al**m_u
        factor = np.empty((d1 - d0, N))
        for i, d in enumerate(range(d0, d1)):
            if d in wanted:
                level[d] = (lvl_num.copy(), lvl_w.copy())
            with np.errstate(divide="ignore", invalid="ignore"):
                factor[i] = np.where(lvl_w > 0, lvl_num / lvl_w, 0.0)
            lvl_num = dl[i] * lvl_num + q_lvl[i]
            lvl_w = dl[i] * lvl_w + m_u[i]
            if shift[d].any():
                lvl_num[shift[d]] = 0.0
                lvl_w[shift[d]] = 0.0
        # One factor for all four parts: u_b is untouched, but the parts
        # follow a launch within days instead of weeks of slot updates.
        b = base[:, days]
        b *= np.exp(factor)[None, :, None, :]

        with np.errstate(divide="ignore", invalid="ignore"):
            g, c, t = G[days], C[days], T[days]
            lnG = np.log(np.where(g > 0, g, np.nan))
            lnP = np.log(np.where((g > 0) & ok, c / g, np.nan))
            lnK = np.log(np.where(ok & (t > 0), c / t, np.nan))
            g_ok = lrn & np.isfinite(lnG) & (b[2] > 0)
            t_ok = lrn & np.isfinite(lnK) & (b[3] > 0)
            r_p = np.where(g_ok, lnP - np.log(b[0] / b[2]), 0.0)
            r_f = np.where(g_ok, lnG - np.log(b[2]), 0.0)
            r_t = np.where(t_ok, lnK - np.log(b[0] / b[3]), 0.0)
        q = np.stack([(r_p**2).sum(1), (r_f**2).sum(1), (r_t**2).sum(1)])
        m_g, m_t = g_ok.sum(axis=1), t_ok.sum(axis=1)
        m = np.stack([m_g, m_g, m_t])
        decay = av**m
        for i, d in enumerate(range(d0, d1)):
            if d in wanted:
                ss_at[d], sw_at[d] = ss.copy(), sw.copy()
            with np.errstate(divide="ignore", invalid="ignore"):
                sig[:, d] = ss / np.where(sw > 0, sw, np.nan)
            ss = decay[:, i] * ss + q[:, i]
            sw = decay[:, i] * sw + m[:, i]
    level[n_days] = (lvl_num, lvl_w)
    ss_at[n_days], sw_at[n_days] = ss, sw
    with np.errstate(invalid="ignore"):
        sig = np.fmax(np.sqrt(sig), cfg.band_floor)
    return level, {"sig": sig, "ss": ss_at, "sw": sw_at}
