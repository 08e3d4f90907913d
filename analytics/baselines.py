"""Dynamic baselines for unit costs: EWMA of the additive parts per seasonal slot.

The state of a series is, per seasonal slot (weekday for days; weekday-or-
weekend x hour for hours, or hour of week), an exponentially weighted mean of
its additive parts: cost, GPU-hours, tokens and finished requests. The baseline
unit cost is the ratio of those means (``1000 * cost_b / requests_b``), never
a mean of ratios, so ``u - u_baseline`` splits exactly by LMDI
(``analytics.lmdi``) into the same parts. docs/baselines.md gives the design,
the defaults and the warm-up they imply.

Rules, all applied to every series at once (the loop is over days; within a
day every series and hour is one numpy operation):

- the baseline at t uses only rows before t (a row updates its slot after it
  has been compared);
- the band is ``baseline * exp(+-k * sigma)``, sigma an exponentially
  weighted RMS of ``ln(u / baseline)`` over the series' recent accepted rows,
  floored (a noiseless series would otherwise flag float noise), and wider
  where a slot's baseline rests on few observations;
- a row flags only after warm-up (``min_obs`` accepted rows in its slot) and
  at or above ``min_requests``; a row with missing, zero or negative cost or
  requests has no unit cost: no flag and no update;
- beside the band, a one-sided CUSUM (``analytics.sustained``) flags the days
  of a small rise that lasts, even those just inside the band; a day it holds
  alone stands once a neighbour agrees, and a run's first day joins it;
- known price changes rescale the price from their day
  (``analytics.price_events``);
- flagged rows and calendar holidays are held out of the update; held out for
  ``hold_days`` days in a row, the held values become the new state of their
  slots: a level shift (``level_shift``).

No I/O, no clock: the same frame always gives the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analytics.baseline_levels import levels_and_sigmas
from analytics.baseline_state import BaselineConfig as BaselineConfig
from analytics.baseline_state import BaselineState as BaselineState
from analytics.baseline_state import (
    _fresh_state,
    _state_for,
    band_widening,
    n_slots,
    slot_of,
)
from analytics.baseline_state import warmup_days as warmup_days
from analytics.errors import InvalidInput
from analytics.price_events import (
    measured_ratio,
    price_residual,
    settle_step,
    text_column,
)
from analytics.sustained import evidence, settled_runs, sustained_day

COMPONENTS = ("cost", "gpu_hours", "tokens", "requests")


def _marks(frame: pd.DataFrame, name: str) -> np.ndarray:
    """An optional bool column as 0/1 floats (0 where absent or missing)."""
    if name not in frame.columns:
        return np.zeros(len(frame))
    return frame[name].fillna(False).astype(bool).to_numpy(float)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


@dataclass(frozen=True)
class BaselineRun:
    """``figures``: the per-row frame of ``baselines_compute``; ``checkpoints``:
    the state at the start of each requested day; ``final``: after the last."""

    figures: pd.DataFrame
    checkpoints: dict[pd.Timestamp, BaselineState]
    final: BaselineState | None


def baselines_compute(
    frame: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    time: str = "period_start",
    config: BaselineConfig | None = None,
) -> pd.DataFrame:
    """Baseline, band and flags for every row of every series.

    ``frame`` columns: ``keys`` (identify a series; put the currency and the
    clock in them where they vary), ``time`` (UTC period start: midnight for
    days, the hour for hours), ``cost`` and ``requests`` (required),
    ``gpu_hours`` and ``tokens`` (optional, NaN where unknown), ``holiday``
    and ``in_progress`` (optional bools; a period in progress is judged but
    settles no run: ``settled_runs``), ``price_change`` and ``price_lump``
    (optional text: a known price change effective that day, a one-off amount
    on that day; ``analytics.price_events``). One row per series and period.

    Returns a frame on the same index with: ``slot``, ``cost_b``,
    ``gpu_hours_b``, ``tokens_b``, ``requests_b`` (the slot's EWMA before the
    row, rescaled to the series' traffic level), ``u`` and ``baseline`` ($ per
    1k requests), ``lower``, ``upper``, ``sigma`` (the band's, of ln u,
    widened where the slot is young: ``band_widening``), ``sigma_price``
    and ``sigma_fleet`` (of ln P and ln G against their baselines, for the
    classes in ``analytics.explain``), ``baseline_per_1m_tokens`` (the same
    state's cost over its tokens) with ``lower_per_1m_tokens``,
    ``upper_per_1m_tokens`` and ``sigma_tokens`` (of ln $/token: a band only,
    flags stay on $ per 1k requests), ``warm`` (slot past warm-up),
    ``volume_ok``, ``flag`` (outside the band, or held by the sustained
    detector; settled by the periods around it: ``settled_runs``),
    ``sustained`` (held by it), ``pending`` (a hold the next period confirms
    or withdraws), ``held`` (kept out of the update), ``level_shift``,
    ``price_ratio`` (the known price change applied to the baseline on that
    day, every row of the day; NaN: none) and ``lump`` (a one-off amount).
    """
    return baselines_run(frame, keys=keys, time=time, config=config).figures


def baselines_run(
    frame: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    time: str = "period_start",
    config: BaselineConfig | None = None,
    initial: BaselineState | None = None,
    checkpoints: Sequence[pd.Timestamp | str] = (),
) -> BaselineRun:
    """``baselines_compute`` that can resume from a state and save states.

    With ``initial``, the run starts at ``initial.day`` from that state (rows
    before it are refused; series the state does not know start fresh), so
    an incremental recompute after a restated day is: the latest checkpoint
    at or before that day, the affected series' rows from its day on. The
    result equals the full run exactly (each series' arithmetic is its own).
    ``checkpoints`` are UTC days at whose start the state is saved.
    """
    cfg = config or BaselineConfig()
    keys = list(keys)
    for name in (*keys, time, "cost", "requests"):
        if name not in frame.columns:
            raise InvalidInput(name, None, "column is required")
    if initial is not None:
        if initial.config != cfg:
            raise InvalidInput(
                "initial", initial.config, "state of another configuration"
            )
        if list(initial.keys) != keys:
            raise InvalidInput(
                "initial", initial.keys, f"state keyed by other columns than {keys}"
            )
    n_rows = len(frame)
    kind = cfg.slot_kind()
    per_day = cfg.periods_per_day
    if n_rows == 0:
        return BaselineRun(_empty(frame.index), {}, initial)

    column = frame[time]
    if column.dtype == "datetime64[ns]":  # naive UTC already: no conversion pass
        stamps = pd.DatetimeIndex(column)
    else:
        stamps = pd.DatetimeIndex(pd.to_datetime(column, utc=True)).tz_convert(None)
        stamps = stamps.as_unit("ns")
    # Integer nanoseconds: day and hour arithmetic without datetime objects.
    ns = stamps.asi8
    day_ns, hour_ns = 86_400 * 10**9, 3_600 * 10**9
    unit = day_ns if cfg.grain == "day" else hour_ns
    off = ns % unit != 0
    if off.any():
        what = "not midnight UTC" if cfg.grain == "day" else "not a whole hour"
        raise InvalidInput(time, str(stamps[off][0]), what)
    if len(keys) == 1:
        # A missing key is a series of its own; asking for that up front
        # costs a pass over every (object) key, so only when one is missing.
        series_code, uniques = pd.factorize(frame[keys[0]], sort=True)
        if len(series_code) and series_code.min() < 0:
            series_code, uniques = pd.factorize(
                frame[keys[0]], sort=True, use_na_sentinel=False
            )
        series_keys = [(k,) for k in uniques]
    else:
        series_code, uniques = pd.factorize(
            pd.MultiIndex.from_frame(frame[keys]), sort=True
        )
        series_keys = [tuple(k) for k in uniques]
    series_code = np.asarray(series_code)
    n_series = len(series_keys)
    days_since_epoch = ns // day_ns
    first_day = int(days_since_epoch.min())
    if initial is not None:
        start = int(pd.Timestamp(initial.day).value // day_ns)
        if first_day < start:
            raise InvalidInput(
                time, str(stamps[days_since_epoch < start][0]), "before the state's day"
            )
        first_day = start
    day0 = pd.Timestamp(first_day * day_ns)
    day_idx = days_since_epoch - first_day
    pos = np.zeros(n_rows, dtype=np.int64) if per_day == 1 else (ns // hour_ns) % 24
    n_days = int(day_idx.max()) + 1
    flat = (day_idx * per_day + pos) * n_series + series_code
    if np.bincount(flat, minlength=1).max() > 1:  # O(n), unlike np.unique
        dup = frame.loc[pd.Series(flat).duplicated().to_numpy(), [*keys, time]].iloc[0]
        raise InvalidInput(time, dup.to_dict(), "two rows for one series and period")

    shape = (n_days, per_day, n_series)
    # A frame sorted by series then time with no gap (the usual load) is its
    # grid already, series-major: a transposed view, no scatter.
    flat_sm = (series_code * n_days + day_idx) * per_day + pos
    identity = n_rows == n_series * n_days * per_day and bool(
        flat_sm[0] == 0 and (np.diff(flat_sm) == 1).all()
    )

    def grid(values: np.ndarray) -> np.ndarray:
        if identity:
            return values.reshape(n_series, n_days, per_day).transpose(1, 2, 0)
        g = np.full(n_days * per_day * n_series, np.nan)
        g[flat] = values
        return g.reshape(shape)

    c_rows = _column(frame, "cost")
    r_rows = _column(frame, "requests")
    C = grid(c_rows)
    R = grid(r_rows)
    G = grid(_column(frame, "gpu_hours"))
    T = grid(_column(frame, "tokens"))
    H = grid(_marks(frame, "holiday")) > 0.5
    going = grid(_marks(frame, "in_progress")) > 0.5
    lump = text_column(frame, "price_lump") != ""
    L = grid(lump.astype(float)) > 0.5
    changes = text_column(frame, "price_change") != ""
    # A change is effective from its day: any row of the day carries it.
    K = np.asarray((grid(changes.astype(float)) > 0.5).any(axis=1))

    grid_days = day0 + pd.to_timedelta(np.arange(n_days), unit="D")
    grid_stamps = grid_days.repeat(per_day) + pd.to_timedelta(
        np.tile(np.arange(per_day), n_days), unit="h"
    )
    slot_grid = slot_of(grid_stamps, kind).reshape(n_days, per_day)

    wanted = {
        int((pd.Timestamp(c).normalize().value // day_ns) - first_day): pd.Timestamp(
            c
        ).normalize()
        for c in checkpoints
    }
    # A checkpoint after the last day is the final state.
    in_range = frozenset(d for d in wanted if 0 <= d < n_days)
    init = _state_for(initial, series_keys) if initial is not None else None
    res, saved, final = _run(
        C, R, G, T, H, slot_grid, n_slots(kind), cfg, init, in_range, known=K, lumps=L,
        in_progress=going,
    )  # fmt: skip

    def as_state(arrays: dict[str, np.ndarray], day: pd.Timestamp) -> BaselineState:
        return BaselineState(cfg, tuple(keys), tuple(series_keys), day, arrays)

    end_day = day0 + pd.Timedelta(days=n_days)
    states = {wanted[d]: as_state(arr, wanted[d]) for d, arr in saved.items()}

    # Back to rows. A transposing copy to series-major order is cache
    # friendly, a scattered gather from time-major is not; and a frame sorted
    # by series then time (the usual load) needs no gather at all.
    def rows_of(arr: np.ndarray) -> np.ndarray:
        sm = np.ascontiguousarray(np.moveaxis(arr, -1, 0)).reshape(-1)
        return sm if identity else sm[flat_sm]

    def rows_of_day(arr: np.ndarray) -> np.ndarray:
        """(day, series) -> rows: one value per day for all its periods."""
        sm = np.repeat(np.ascontiguousarray(arr.T).reshape(-1), per_day)
        return sm if identity else sm[flat_sm]

    # Only the primitives are transposed; what derives from them (ratios,
    # bands) is computed on rows, and u and the volume come from the rows.
    slot_sm = np.broadcast_to(slot_grid[None], (n_series, n_days, per_day)).reshape(-1)
    columns: dict[str, np.ndarray] = {"slot": slot_sm if identity else slot_sm[flat_sm]}
    for name in ("cost_b", "gpu_hours_b", "tokens_b", "requests_b"):
        columns[name] = rows_of(res[name])
    k = cfg.band_k
    s_u = rows_of(res["band_sigma"])
    s_p, s_f, s_t = (rows_of_day(sig) for sig in res["sig"])
    with np.errstate(divide="ignore", invalid="ignore"):
        valid = (c_rows > 0) & (r_rows > 0) & np.isfinite(c_rows) & np.isfinite(r_rows)
        columns["u"] = np.where(valid, 1000.0 * c_rows / r_rows, np.nan)
        baseline = 1000.0 * columns["cost_b"] / columns["requests_b"]
        per_token = 1e6 * columns["cost_b"] / columns["tokens_b"]
        e_u, e_t = np.exp(k * s_u), np.exp(k * s_t)
    columns.update(
        baseline=baseline, lower=baseline / e_u, upper=baseline * e_u, sigma=s_u,
        sigma_price=s_p, sigma_fleet=s_f, baseline_per_1m_tokens=per_token,
        lower_per_1m_tokens=per_token / e_t, upper_per_1m_tokens=per_token * e_t,
        sigma_tokens=s_t,
    )  # fmt: skip
    columns["warm"] = rows_of(res["warm"])
    columns["volume_ok"] = valid & (r_rows >= cfg.min_requests)
    columns["flag"] = rows_of(res["flag"])
    columns["sustained"] = rows_of(res["sustained"])
    columns["pending"] = rows_of(res["pending"])
    columns["held"] = rows_of(res["held"])
    columns["level_shift"] = rows_of_day(res["shift"])
    columns["price_ratio"] = rows_of_day(res["price_ratio"])
    columns["lump"] = lump
    figures = pd.DataFrame(columns, index=frame.index, copy=False)
    return BaselineRun(figures, states, as_state(final, end_day))


def _empty(index: pd.Index) -> pd.DataFrame:
    cols = {
        "slot": "int64", "cost_b": float, "gpu_hours_b": float, "tokens_b": float,
        "requests_b": float, "u": float, "baseline": float, "lower": float,
        "upper": float, "sigma": float, "sigma_price": float, "sigma_fleet": float,
        "baseline_per_1m_tokens": float, "lower_per_1m_tokens": float,
        "upper_per_1m_tokens": float, "sigma_tokens": float,
        "warm": bool, "volume_ok": bool, "flag": bool, "sustained": bool, "held": bool,
        "pending": bool, "level_shift": bool, "price_ratio": float, "lump": bool,
    }  # fmt: skip
    return pd.DataFrame({k: pd.Series(dtype=v, index=index) for k, v in cols.items()})


def _slot_index(sl: np.ndarray) -> slice | np.ndarray:
    """The day's slots as a slice where they are one ascending run (every
    slot kind but ``none`` at hourly grain): state reads are then views and
    updates happen in place, instead of gather and scatter copies."""
    if len(sl) and (np.diff(sl) == 1).all():
        return slice(int(sl[0]), int(sl[0]) + len(sl))
    return sl


def _masked_update(
    state: np.ndarray, idx: slice | np.ndarray, mask: np.ndarray, a: float,
    x: np.ndarray | float,
) -> None:  # fmt: skip
    """``state[:, idx] = a * state + x`` where ``mask``, unchanged elsewhere."""
    if isinstance(idx, slice):
        view = state[:, idx]
        np.copyto(view, a * view + x, where=mask)
    else:
        old = state[:, idx]
        state[:, idx] = np.where(mask, a * old + x, old)


def _run(
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
    known: np.ndarray,
    lumps: np.ndarray,
    in_progress: np.ndarray,
) -> tuple[
    dict[str, np.ndarray], dict[int, dict[str, np.ndarray]], dict[str, np.ndarray]
]:
    """Grids are (day, period of day, series); states are (component, slot,
    series) with components cost, requests, GPU-hours, tokens in that order.

    Only what decides a flag is sequential: the slot EWMAs (the flag compares
    against them, and a flagged row is kept out of them), the sigma of ln u
    (the band), the warm-up counts and the held-out run. That is the loop
    over days, every series and period of a day in one numpy operation. The
    traffic level and the sigmas of price, fleet and $ per token feed no
    flag: they are computed after it for all days at once from what the loop
    recorded (which rows were learnt from, the slot states, the shifts), with
    only their per-series recurrences (arrays of one value per series) left
    in a loop."""
    n_days, P, N = C.shape
    a = 0.5 ** (1.0 / cfg.halflife_obs)  # slot decay per accepted observation
    av = 0.5 ** (1.0 / (cfg.sigma_halflife_days * P))  # sigma decay per row
    hold_rows = cfg.hold_days * P
    hold_down_rows = cfg.hold_down_days * P
    k = cfg.band_k
    floor = cfg.band_floor

    with np.errstate(divide="ignore", invalid="ignore"):
        # One copy into (part, day, period, series) order: the grids may be
        # transposed views of the frame's columns, and every pass below (and
        # after the loop) then reads contiguous memory.
        X = np.stack([C, R, G, T])
        C, R, G, T = X
        present = np.isfinite(X)
        valid = (C > 0) & (R > 0) & present[0] & present[1]
        lnU = np.log(np.where(valid, 1000.0 * C / R, np.nan))
        vol = valid & (R >= cfg.min_requests)
        np.copyto(X, 0.0, where=~present)  # in place: C, R, G, T too
        # Which of the four parts a period may update, before the flag says
        # whether it does: cost and requests always, GPU-hours and tokens
        # where measured (finite, and not negative).
        present[2] &= G >= 0
        present[3] &= T >= 0
        present[0] = True
        present[1] = True

    # Slot states: EWMA numerators (adjust=True form) and weights.
    state = (
        _fresh_state(S, N) if init is None else {k: v.copy() for k, v in init.items()}
    )
    num, wgt, nobs = state["num"], state["wgt"], state["nobs"]
    shadow, shadow_w, shadow_on = state["shadow"], state["shadow_w"], state["shadow_on"]
    run = state["run"]
    run_down = state["run_down"].copy()
    down_sum = state["down_sum"].copy()
    cusum = state["cusum"].copy()
    price = {k: state[k].copy() for k in ("price_n", "price_sum", "price_fix")}
    # Sigma of ln u per series: sums of squared log residuals and weights.
    ss_u, sw_u = state["ss"][0].copy(), state["sw"][0].copy()
    saved: dict[int, dict[str, np.ndarray]] = {}

    def snapshot() -> dict[str, np.ndarray]:
        return {
            "num": num.copy(), "wgt": wgt.copy(), "nobs": nobs.copy(),
            "shadow": shadow.copy(), "shadow_w": shadow_w.copy(),
            "shadow_on": shadow_on.copy(), "run": run.copy(), "ss_u": ss_u.copy(),
            "sw_u": sw_u.copy(), "cusum": cusum.copy(), "run_down": run_down.copy(),
            "down_sum": down_sum.copy(), **{k: v.copy() for k, v in price.items()},
        }  # fmt: skip

    # Every day writes all of these: no need to fill them first.
    base = np.empty((4, n_days, P, N))  # cost_b, requests_b, gpu_hours_b, tokens_b
    band_g = np.empty((n_days, P, N))  # the band's sigma of ln u, per row
    out_g = np.zeros((n_days, P, N), dtype=bool)  # outside that band
    warm_g = np.zeros((n_days, P, N), dtype=bool)
    flag_g = np.zeros((n_days, P, N), dtype=bool)
    sust_g = np.zeros((n_days, P, N), dtype=bool)
    held_g = np.zeros((n_days, P, N), dtype=bool)
    learn_g = np.zeros((n_days, P, N), dtype=bool)
    shift_g = np.zeros((n_days, N), dtype=bool)
    ratio_g = np.full((n_days, N), np.nan)
    rows = np.arange(P)[:, None]
    index = [_slot_index(slot_grid[d]) for d in range(n_days)]

    with np.errstate(divide="ignore", invalid="ignore"):
        for d in range(n_days):
            if d in checkpoints:
                saved[d] = snapshot()
            sl = index[d]  # distinct slots within a day
            b = base[:, d]
            np.divide(num[:, sl], wgt[:, sl], out=b)  # the slots' state, unscaled
            # A known price change: judged against the new price from its day.
            settling = known[d].any() or bool(price["price_n"].any())
            if settling:
                residual = price_residual(b, X[:, d], valid[d])
                ratio = measured_ratio(residual, known[d], cfg.price_min)
                moved = np.isfinite(ratio)
                if moved.any():
                    num[0] *= np.where(moved, ratio, 1.0)[None, :]
                    shadow[0] *= np.where(moved, ratio, 1.0)[None, :]
                    # As after a fall: the rescaled state rests on one day.
                    num *= np.where(moved, cfg.fall_damp, 1.0)[None, None, :]
                    wgt *= np.where(moved, cfg.fall_damp, 1.0)[None, None, :]
                    for arr in (cusum, run_down, down_sum, price["price_sum"]):
                        arr[moved] = 0.0
                    price["price_n"][moved] = 1.0
                    price["price_fix"][moved] = 0.0
                    ratio_g[d] = ratio
                used = valid[d].any(axis=0) & ~moved & ~(H[d] | lumps[d]).any(axis=0)
                scale = settle_step(
                    price, np.clip(residual, -cfg.price_clip, cfg.price_clip), used,
                    cfg.price_settle_days,
                )  # fmt: skip
                # The slots' price only: held values were seen at today's.
                num[0] *= scale[None, :]
                np.divide(num[:, sl], wgt[:, sl], out=b)
            has_b = wgt[0, sl] > 0
            ln_ub = np.log(1000.0 * b[0] / b[1])
            raw = np.sqrt(ss_u / np.where(sw_u > 0, sw_u, np.nan))
            sigma = np.fmax(raw, floor)
            warm = nobs[sl] >= cfg.min_obs
            dev = lnU[d] - ln_ub
            judged = warm & vol[d] & has_b
            band_g[d] = sigma * band_widening(wgt[0, sl], cfg)
            outside = judged & (np.abs(dev) > k * band_g[d])
            # A one-off amount or a holiday (u up for a known reason) neither
            # adds evidence of a shift nor resets it.
            ev = evidence(dev, raw, wgt[0, sl], cfg)
            cusum, sustained = sustained_day(cusum, ev, judged & ~lumps[d] & ~H[d], cfg)
            flag = outside | sustained
            held = valid[d] & (flag | H[d] | lumps[d])
            accept = valid[d] & ~held
            warm_g[d], flag_g[d], held_g[d], out_g[d] = warm, flag, held, outside
            sust_g[d] = sustained

            # Sigma learns from accepted, volume-ok rows.
            learn = accept & vol[d] & has_b
            learn_g[d] = learn
            r_u = np.where(learn, dev, 0.0)
            m_u = learn.sum(axis=0)
            decay = av**m_u
            ss_u = decay * ss_u + (r_u**2).sum(0)
            sw_u = decay * sw_u + m_u

            # Slot update.
            x = X[:, d]
            mask = present[:, d] & accept
            _masked_update(num, sl, mask, a, x)
            _masked_update(wgt, sl, mask, a, 1.0)
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
                _masked_update(shadow, sl, smask, a, x)
                _masked_update(shadow_w, sl, smask, a, 1.0)
                shadow_on |= held_after.any(axis=0)

            # The run of the band's falls (not holidays) per series, the same way.
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
                num, wgt = num * damp, wgt * damp
                shift_g[d] |= fell
                # The next days settle the ratio, as after a known change.
                price["price_n"][fell] = run_down[fell] / P
                price["price_sum"][fell] = price["price_fix"][fell] = 0.0
                for arr in (run, run_down, down_sum):
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
                # ... and a price change still settling is superseded by them.
                for arr in (run, run_down, down_sum, *price.values()):
                    arr[shift] = 0.0
                shadow[:, :, shift] = 0.0
                shadow_w[:, :, shift] = 0.0
                shadow_on &= ~shift

    final = snapshot()
    settled = settled_runs(flag_g, sust_g, out_g, lnU, base, warm_g & vol,
                           valid & ~in_progress, H | lumps, cfg)  # fmt: skip
    # The grids are zero where they were not finite: every use after the
    # loop is masked by ``valid`` or a positive value, which neither passes.
    level, side = levels_and_sigmas(
        base, learn_g, shift_g, R, valid, G, C, T, state, cfg, checkpoints
    )
    for d, arrays in [*saved.items(), (n_days, final)]:
        arrays["ss"] = np.concatenate([arrays.pop("ss_u")[None], side["ss"][d]])
        arrays["sw"] = np.concatenate([arrays.pop("sw_u")[None], side["sw"][d]])
        arrays["lvl_num"], arrays["lvl_w"] = level[d]
    figures = {
        "cost_b": base[0],
        "gpu_hours_b": base[2],
        "tokens_b": base[3],
        "requests_b": base[1],
        "band_sigma": band_g,
        "sig": side.pop("sig"),  # of ln P, ln G, ln $/token
        "warm": warm_g,
        **settled,  # flag, sustained, pending
        "held": held_g,
        "shift": shift_g,
        "price_ratio": ratio_g,
    }
    return figures, saved, final
