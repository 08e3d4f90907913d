"""The baselines' day loop as first written: every state, the traffic level
and all four sigmas updated inside one loop over days. ``analytics.baselines``
now runs only what decides a flag in that loop and the rest after it; this
copy is the specification its tests hold it to (figures and saved states)."""

from __future__ import annotations

import numpy as np

from analytics.baseline_state import BaselineConfig, _fresh_state
from analytics.price_events import measured_ratio, price_residual, settle_step


def reference_run(
    C: np.ndarray,
    R: np.ndarray,
    G: np.ndarray,
    T: np.ndarray,
    H: np.ndarray,
    slot_grid: np.ndarray,
    S: int,
    cfg: BaselineConfig,
    init: dict[str, np.ndarray] | None = None,
    checkpoints: frozenset[int] = frozenset(),
    *,
    known: np.ndarray | None = None,
    lumps: np.ndarray | None = None,
    in_progress: np.ndarray | None = None,
) -> tuple[
    dict[str, np.ndarray], dict[int, dict[str, np.ndarray]], dict[str, np.ndarray]
]:
    """The day loop. Grids are (day, period of day, series); states are
    (component, slot, series) with components cost, requests, GPU-hours,
    tokens in that order."""
    n_days, P, N = C.shape
    known = np.zeros((n_days, N), dtype=bool) if known is None else known
    lumps = np.zeros((n_days, P, N), dtype=bool) if lumps is None else lumps
    if in_progress is None:
        in_progress = np.zeros((n_days, P, N), dtype=bool)
    a = 0.5 ** (1.0 / cfg.halflife_obs)  # slot decay per accepted observation
    av = 0.5 ** (1.0 / (cfg.sigma_halflife_days * P))  # sigma decay per row
    al = 0.5 ** (1.0 / (cfg.level_halflife_days * P))  # traffic level decay per row
    hold_rows = cfg.hold_days * P
    hold_down_rows = cfg.hold_down_days * P
    k = cfg.band_k
    floor = cfg.band_floor

    with np.errstate(divide="ignore", invalid="ignore"):
        X = np.stack([C, R, G, T])  # (4, day, P, N)
        valid = (C > 0) & (R > 0) & np.isfinite(C) & np.isfinite(R)
        U = np.where(valid, 1000.0 * C / R, np.nan)
        vol = valid & (R >= cfg.min_requests)
        g_present = np.isfinite(G) & (G >= 0)
        t_present = np.isfinite(T) & (T >= 0)
        X = np.where(np.isfinite(X), X, 0.0)  # one pass, unlike nan_to_num
        # Which of the four parts a period may update, before the flag says
        # whether it does: cost and requests always, GPU-hours and tokens
        # where measured.
        present = np.stack([np.ones_like(g_present), np.ones_like(g_present),
                            g_present, t_present])  # fmt: skip
        lnU = np.log(U)
        lnG = np.log(np.where(G > 0, G, np.nan))
        lnP = np.log(np.where((G > 0) & valid, C / G, np.nan))
        lnR = np.log(np.where(valid, R, np.nan))
        lnK = np.log(np.where(valid & (T > 0), C / T, np.nan))  # $ per token

    # Slot states: EWMA numerators (adjust=True form) and weights.
    state = (
        _fresh_state(S, N) if init is None else {k: v.copy() for k, v in init.items()}
    )
    num, wgt, nobs = state["num"], state["wgt"], state["nobs"]
    shadow, shadow_w, shadow_on = state["shadow"], state["shadow_w"], state["shadow_on"]
    run = state["run"]
    run_down = state["run_down"].copy()
    down_sum = state["down_sum"].copy()
    cusum = state["cusum"]
    price = {k: state[k].copy() for k in ("price_n", "price_sum", "price_fix")}
    # Traffic level per series: EWMA of ln(R / R_slot) over accepted rows.
    lvl_num, lvl_w = state["lvl_num"], state["lvl_w"]
    # Sigma states per series (u, price, fleet, $ per token): sums of squared
    # log residuals.
    ss, sw = state["ss"], state["sw"]
    saved: dict[int, dict[str, np.ndarray]] = {}

    def snapshot() -> dict[str, np.ndarray]:
        return {
            "num": num.copy(), "wgt": wgt.copy(), "nobs": nobs.copy(),
            "shadow": shadow.copy(), "shadow_w": shadow_w.copy(),
            "shadow_on": shadow_on.copy(), "run": run.copy(), "lvl_num": lvl_num.copy(),
            "lvl_w": lvl_w.copy(), "ss": ss.copy(), "sw": sw.copy(),
            "cusum": cusum.copy(), "run_down": run_down.copy(),
            "down_sum": down_sum.copy(), **{k: v.copy() for k, v in price.items()},
        }  # fmt: skip

    # Every day writes all of these: no need to fill them first.
    base = np.empty((4, n_days, P, N))  # cost_b, requests_b, gpu_hours_b, tokens_b
    sig = np.empty((4, n_days, N))
    band = np.empty((n_days, P, N))
    warm_g = np.zeros((n_days, P, N), dtype=bool)
    flag_g = np.zeros((n_days, P, N), dtype=bool)
    sust_g = np.zeros((n_days, P, N), dtype=bool)
    held_g = np.zeros((n_days, P, N), dtype=bool)
    shift_g = np.zeros((n_days, N), dtype=bool)
    ratio_g = np.full((n_days, N), np.nan)
    rows = np.arange(P)[:, None]

    with np.errstate(divide="ignore", invalid="ignore"):
        for d in range(n_days):
            if d in checkpoints:
                saved[d] = snapshot()
            sl = slot_grid[d]  # (P,) distinct slots within a day
            slot_num = num[:, sl]  # (4, P, N)
            slot_w = wgt[:, sl]
            # A known change (analytics.price_events) rescales the price from
            # its day; the next days, and those after a fall, settle it.
            if known[d].any() or price["price_n"].any():
                residual = price_residual(slot_num / slot_w, X[:, d], valid[d])
                ratio = measured_ratio(residual, known[d], cfg.price_min)
                moved = np.isfinite(ratio)
                if moved.any():
                    num[0] *= np.where(moved, ratio, 1.0)[None, :]
                    shadow[0] *= np.where(moved, ratio, 1.0)[None, :]
                    num *= np.where(moved, cfg.fall_damp, 1.0)[None, None, :]
                    wgt *= np.where(moved, cfg.fall_damp, 1.0)[None, None, :]
                    for arr in (cusum, run_down, down_sum, price["price_sum"]):
                        arr[moved] = 0.0
                    price["price_n"][moved] = 1.0
                    price["price_fix"][moved] = 0.0
                    ratio_g[d] = ratio
                residual = np.clip(residual, -cfg.price_clip, cfg.price_clip)
                used = valid[d].any(axis=0) & ~moved & ~(H[d] | lumps[d]).any(axis=0)
                scale = settle_step(price, residual, used, cfg.price_settle_days)
                num[0] *= scale[None, :]
                slot_num = num[:, sl]
                slot_w = wgt[:, sl]
            b = slot_num / slot_w
            ln_rb_slot = np.log(b[1])
            # One factor for all four parts: u_b is untouched, but the parts
            # follow a launch within days instead of weeks of slot updates.
            b *= np.exp(np.where(lvl_w > 0, lvl_num / lvl_w, 0.0))
            base[:, d] = b
            has_b = slot_w[0] > 0
            ln_ub = np.log(1000.0 * b[0] / b[1])
            sigmas = np.fmax(np.sqrt(ss / np.where(sw > 0, sw, np.nan)), floor)
            sig[:, d] = sigmas
            warm = nobs[sl] >= cfg.min_obs
            dev = lnU[d] - ln_ub
            judged = warm & vol[d] & has_b
            # A prediction interval: the slot's own uncertainty, relative to
            # that of a settled slot (weight 1 / (1 - a)), widens the band.
            widen = (1 + cfg.band_base / slot_w[0]) / (1 + cfg.band_base * (1 - a))
            band[d] = sigmas[0] * np.sqrt(np.fmax(widen, 1.0))
            outside = judged & (np.abs(dev) > k * band[d])
            # The sustained detector, period by period (analytics.sustained).
            for p in range(P):
                if cfg.sustained_h <= 0:
                    break
                # The log-likelihood ratio of a rise by d against none, on
                # the raw sigma widened by the baseline's 1 / weight.
                raw = np.sqrt(ss[0] / np.where(sw[0] > 0, sw[0], np.nan))
                d_up = cfg.sustained_shift
                var = np.fmax(raw, cfg.sustained_floor) ** 2 * (
                    1.0 + cfg.sustained_base / slot_w[0, p]
                )
                z = np.nan_to_num(d_up * (dev[p] - d_up / 2) / var, nan=0.0)
                new = np.minimum(
                    np.maximum(cusum + z, 0.0), cfg.sustained_h + cfg.sustained_cap
                )
                # A one-off amount or a holiday: no evidence either way.
                judged_p = judged[p] & ~lumps[d, p] & ~H[d, p]
                cusum = np.where(judged_p, new, cusum)
                sust_g[d, p] = judged_p & (cusum > cfg.sustained_h + 1e-9)
            flag = outside | sust_g[d]
            held = valid[d] & (flag | H[d] | lumps[d])
            accept = valid[d] & ~held
            warm_g[d], flag_g[d], held_g[d] = warm, flag, held

            # Sigmas and the level learn from accepted, volume-ok rows.
            learn = accept & vol[d] & has_b
            g_ok = learn & np.isfinite(lnG[d]) & (b[2] > 0)
            r_u = np.where(learn, dev, 0.0)
            r_p = np.where(g_ok, lnP[d] - np.log(b[0] / b[2]), 0.0)
            r_f = np.where(g_ok, lnG[d] - np.log(b[2]), 0.0)
            t_ok = learn & np.isfinite(lnK[d]) & (b[3] > 0)
            r_t = np.where(t_ok, lnK[d] - np.log(b[0] / b[3]), 0.0)
            m_u = learn.sum(axis=0)
            m_g = g_ok.sum(axis=0)
            m_t = t_ok.sum(axis=0)
            decay = np.stack([av**m_u, av**m_g, av**m_g, av**m_t])
            ss = decay * ss + np.stack(
                [(r_u**2).sum(0), (r_p**2).sum(0), (r_f**2).sum(0), (r_t**2).sum(0)]
            )
            sw = decay * sw + np.stack([m_u, m_g, m_g, m_t])
            dl = al**m_u
            lvl_num = dl * lvl_num + np.where(learn, lnR[d] - ln_rb_slot, 0.0).sum(
                axis=0
            )
            lvl_w = dl * lvl_w + m_u

            # Slot update (slots are distinct within a day: plain fancy indexing).
            x = X[:, d]
            mask = present[:, d] & accept
            num[:, sl] = np.where(mask, a * slot_num + x, slot_num)
            wgt[:, sl] = np.where(mask, a * slot_w + 1.0, slot_w)
            nobs[sl] += accept

            # Run of held rows per series, in row order within the day; the
            # held rows since the last accepted one feed the shadow state.
            any_acc = accept.any(axis=0)
            last_acc = np.where(any_acc, P - 1 - np.argmax(accept[::-1], axis=0), -1)
            held_after = held & (rows > last_acc[None, :])
            run = np.where(any_acc, held_after.sum(axis=0), run + held.sum(axis=0))
            # Shadows are touched only where a run is going on (rare).
            clear = any_acc & shadow_on
            if clear.any():
                shadow[:, :, clear] = 0.0
                shadow_w[:, :, clear] = 0.0
                shadow_on &= ~clear
            if held_after.any():
                smask = present[:, d] & held_after
                s_num = shadow[:, sl]
                s_w = shadow_w[:, sl]
                shadow[:, sl] = np.where(smask, a * s_num + x, s_num)
                shadow_w[:, sl] = np.where(smask, a * s_w + 1.0, s_w)
                shadow_on |= held_after.any(axis=0)

            # The run of held falls (not holidays) per series, the same way.
            # Only the band's falls: a day the CUSUM carries is no fall.
            down = outside & (dev < 0) & ~H[d] & ~lumps[d]
            brk = valid[d] & ~down
            any_brk = brk.any(axis=0)
            last_brk = np.where(any_brk, P - 1 - np.argmax(brk[::-1], axis=0), -1)
            down_after = down & (rows > last_brk[None, :])
            run_down = np.where(
                any_brk, down_after.sum(axis=0), run_down + down.sum(axis=0)
            )
            down_sum = np.where(any_brk, 0.0, down_sum) + np.where(
                down_after | (down & ~any_brk[None, :]), dev, 0.0
            ).sum(axis=0)

            fell = run_down >= hold_down_rows
            if fell.any():
                # A fall that lasts is a new price: every slot's cost part is
                # rescaled by the run's mean ratio, the other parts kept.
                scale = np.exp(down_sum / np.where(fell, run_down, 1.0))
                num[0] *= np.where(fell, scale, 1.0)[None, :]
                # The rescaled state rests on a few days: the next weeks'
                # values weigh more until the slots have learnt the new level.
                damp = np.where(fell, cfg.fall_damp, 1.0)[None, None, :]
                num *= damp
                wgt *= damp
                shift_g[d] |= fell
                price["price_n"][fell] = run_down[fell] / P
                price["price_sum"][fell] = price["price_fix"][fell] = 0.0
                for arr in (run, run_down, down_sum, lvl_num, lvl_w):
                    arr[fell] = 0.0
                shadow[:, :, fell] = 0.0
                shadow_w[:, :, fell] = 0.0
                shadow_on &= ~fell
            shift = run >= hold_rows
            if shift.any():
                # The held values are the new level of the slots they reached.
                take = (shadow_w > 0) & shift[None, None, :]
                num = np.where(take, shadow, num)
                wgt = np.where(take, shadow_w, wgt)
                shift_g[d] |= shift
                run[shift] = 0.0
                run_down[shift] = 0.0
                down_sum[shift] = 0.0
                # A price change still settling: the held values supersede it.
                for part in price.values():
                    part[shift] = 0.0
                lvl_num[shift] = 0.0
                lvl_w[shift] = 0.0
                shadow[:, :, shift] = 0.0
                shadow_w[:, :, shift] = 0.0
                shadow_on &= ~shift

    final = snapshot()
    flag_g, sust_g, pending = _settled(flag_g, sust_g, lnU, base, band, warm_g & vol,
                                       valid & ~in_progress, H | lumps, cfg)  # fmt: skip
    figures = {
        "cost_b": base[0],
        "gpu_hours_b": base[2],
        "tokens_b": base[3],
        "requests_b": base[1],
        "band_sigma": band,
        "sig": sig[1:],
        "price_ratio": ratio_g,
        "warm": warm_g,
        "flag": flag_g,
        "sustained": sust_g,
        "pending": pending,
        "held": held_g,
        "shift": shift_g,
    }
    return figures, saved, final


def _settled(
    flag: np.ndarray, sustained: np.ndarray, ln_u: np.ndarray, base: np.ndarray,
    sigma: np.ndarray, ready: np.ndarray, valid: np.ndarray, quiet: np.ndarray,
    cfg: BaselineConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``analytics.sustained.settled_runs``, series by series over the list
    of each series' periods: the flags, holds and pending holds."""
    n_days, P, N = flag.shape
    flag, sustained = flag.reshape(-1, N).copy(), sustained.reshape(-1, N).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = (ln_u - np.log(1000.0 * base[0] / base[1])).reshape(-1, N)
    sig = sigma.reshape(-1, N)
    ready, valid, quiet = (g.reshape(-1, N) for g in (ready, valid, quiet))
    edge = cfg.sustained_shift / 2
    out_f, out_s = flag.copy(), sustained.copy()
    pending = np.zeros_like(flag)
    for n in range(N):
        periods = [t for t in range(len(flag)) if valid[t, n]]

        def rise(t: int, f: np.ndarray, n: int = n) -> bool:
            return bool(f[t, n] and dev[t, n] > edge and not quiet[t, n])

        for i, t in enumerate(periods):
            judged = bool(ready[t, n] and np.isfinite(dev[t, n]))
            band = judged and abs(dev[t, n]) > cfg.band_k * sig[t, n]
            if sustained[t, n] and not band:
                after = periods[i + 1] if i + 1 < len(periods) else None
                before = periods[i - 1] if i > 0 else None
                run_end = before is not None and rise(before, flag) and dev[t, n] > edge
                if not (after is None or rise(after, flag) or run_end):
                    out_f[t, n] = out_s[t, n] = False
                pending[t, n] = after is None and not run_end
        for i, t in enumerate(periods[:-1]):
            judged = bool(ready[t, n] and np.isfinite(dev[t, n]))
            if (judged and not out_f[t, n] and not quiet[t, n] and dev[t, n] > edge
                    and rise(periods[i + 1], out_f)):  # fmt: skip
                out_f[t, n] = out_s[t, n] = True
    shape = (n_days, P, N)
    return out_f.reshape(shape), out_s.reshape(shape), pending.reshape(shape)
