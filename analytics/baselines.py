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
  floored (a noiseless series would otherwise flag float noise);
- a row flags only after warm-up (its slot has ``min_obs`` accepted rows) and
  at or above ``min_requests`` (three requests at 4 am are noise);
- a row with missing, zero or negative cost or requests has no unit cost: no
  flag and no update (credits never drag a baseline down);
- flagged rows and calendar holidays are held out of the update; when a
  series has been held out for ``hold_days`` days worth of rows in a row, the
  held values become the new state of their slots: a level shift, reported
  on that day (``level_shift``).

No I/O, no clock: the same frame always gives the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analytics.capacity.errors import InvalidInput

Grain = Literal["day", "hour"]
Slots = Literal["weekday", "hour_of_week", "daytype_hour", "none"]
COMPONENTS = ("cost", "gpu_hours", "tokens", "requests")


@dataclass(frozen=True)
class BaselineConfig:
    """Defaults are argued in docs/baselines.md."""

    grain: Grain = "day"
    # Seasonal slots; None picks weekday for days, daytype_hour for hours.
    slots: Slots | None = None
    # Half-life of the slot EWMA, in observations of that slot.
    halflife_obs: float = 2.0
    # Accepted observations a slot needs before its rows may flag (warm-up).
    min_obs: int = 3
    # Band half-width in sigmas of ln(u / baseline), and its floor (relative).
    band_k: float = 2.5
    band_floor: float = 0.06
    # Half-life of sigma, in days of rows of the series.
    sigma_halflife_days: float = 28.0
    # Half-life of the traffic level that rescales the four parts, in days.
    level_halflife_days: float = 3.0
    # Unit costs need this many finished requests in the period.
    min_requests: float = 100.0
    # Rows held out (flags, holidays) for this many days become a level shift.
    hold_days: int = 14

    def slot_kind(self) -> Slots:
        if self.slots is not None:
            return self.slots
        return "weekday" if self.grain == "day" else "daytype_hour"

    @property
    def periods_per_day(self) -> int:
        return 1 if self.grain == "day" else 24


def n_slots(kind: Slots) -> int:
    return {"weekday": 7, "hour_of_week": 168, "daytype_hour": 48, "none": 1}[kind]


def slot_of(stamps: pd.Series | pd.DatetimeIndex, kind: Slots) -> np.ndarray:
    """Seasonal slot number of each timestamp (UTC)."""
    idx = pd.DatetimeIndex(stamps)
    weekday = np.asarray(idx.weekday)
    hour = np.asarray(idx.hour)
    if kind == "weekday":
        return weekday
    if kind == "hour_of_week":
        return weekday * 24 + hour
    if kind == "daytype_hour":
        return (weekday >= 5).astype(int) * 24 + hour
    return np.zeros(len(idx), dtype=int)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


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
    (optional bool). One row per series and period.

    Returns a frame on the same index with: ``slot``, ``cost_b``,
    ``gpu_hours_b``, ``tokens_b``, ``requests_b`` (the slot's EWMA before the
    row), ``u`` and ``baseline`` ($ per 1k requests), ``lower``, ``upper``,
    ``sigma`` (of ln u), ``sigma_price`` and ``sigma_fleet`` (of ln P and ln G
    against their baselines, for the classes in ``analytics.explain``),
    ``warm`` (slot past warm-up), ``volume_ok``, ``flag`` (outside the band),
    ``held`` (kept out of the update), ``level_shift``.
    """
    cfg = config or BaselineConfig()
    keys = list(keys)
    for name in (*keys, time, "cost", "requests"):
        if name not in frame.columns:
            raise InvalidInput(name, None, "column is required")
    n_rows = len(frame)
    kind = cfg.slot_kind()
    per_day = cfg.periods_per_day
    if n_rows == 0:
        return _empty(frame.index)

    stamps = pd.DatetimeIndex(pd.to_datetime(frame[time], utc=True)).tz_convert(None)
    if cfg.grain == "day" and (stamps != stamps.normalize()).any():
        raise InvalidInput(
            time, str(stamps[stamps != stamps.normalize()][0]), "not midnight UTC"
        )
    if cfg.grain == "hour" and (stamps != stamps.floor("h")).any():
        raise InvalidInput(
            time, str(stamps[stamps != stamps.floor("h")][0]), "not a whole hour"
        )
    series_code = frame.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()
    n_series = int(series_code.max()) + 1
    day0 = stamps.normalize().min()
    day_idx = np.asarray(
        (stamps.normalize() - day0) // pd.Timedelta(days=1), dtype=np.int64
    )
    pos = np.zeros(n_rows, dtype=np.int64) if per_day == 1 else np.asarray(stamps.hour)
    n_days = int(day_idx.max()) + 1
    flat = (day_idx * per_day + pos) * n_series + series_code
    if len(np.unique(flat)) != n_rows:
        dup = frame.loc[pd.Series(flat).duplicated().to_numpy(), [*keys, time]].iloc[0]
        raise InvalidInput(time, dup.to_dict(), "two rows for one series and period")

    shape = (n_days, per_day, n_series)

    def grid(values: np.ndarray) -> np.ndarray:
        g = np.full(n_days * per_day * n_series, np.nan)
        g[flat] = values
        return g.reshape(shape)

    C = grid(_column(frame, "cost"))
    R = grid(_column(frame, "requests"))
    G = grid(_column(frame, "gpu_hours"))
    T = grid(_column(frame, "tokens"))
    hol_values = (
        frame["holiday"].fillna(False).astype(bool).to_numpy(float)
        if "holiday" in frame.columns
        else np.zeros(n_rows)
    )
    H = grid(hol_values) > 0.5

    grid_days = day0 + pd.to_timedelta(np.arange(n_days), unit="D")
    grid_stamps = grid_days.repeat(per_day) + pd.to_timedelta(
        np.tile(np.arange(per_day), n_days), unit="h"
    )
    slot_grid = slot_of(grid_stamps, kind).reshape(n_days, per_day)

    res = _run(C, R, G, T, H, slot_grid, n_slots(kind), cfg)

    out = pd.DataFrame(index=frame.index)
    out["slot"] = slot_grid.reshape(-1).repeat(n_series)[flat]
    for name, arr in res.items():
        out[name] = arr.reshape(-1)[flat]
    for name in ("warm", "volume_ok", "flag", "held", "level_shift"):
        out[name] = out[name].astype(bool)
    return out


def _empty(index: pd.Index) -> pd.DataFrame:
    cols = {
        "slot": "int64", "cost_b": float, "gpu_hours_b": float, "tokens_b": float,
        "requests_b": float, "u": float, "baseline": float, "lower": float,
        "upper": float, "sigma": float, "sigma_price": float, "sigma_fleet": float,
        "warm": bool, "volume_ok": bool, "flag": bool, "held": bool, "level_shift": bool,
    }  # fmt: skip
    return pd.DataFrame({k: pd.Series(dtype=v, index=index) for k, v in cols.items()})


def _run(
    C: np.ndarray,
    R: np.ndarray,
    G: np.ndarray,
    T: np.ndarray,
    H: np.ndarray,
    slot_grid: np.ndarray,
    S: int,
    cfg: BaselineConfig,
) -> dict[str, np.ndarray]:
    n_days, P, N = C.shape
    a = 0.5 ** (1.0 / cfg.halflife_obs)  # slot decay per accepted observation
    av = 0.5 ** (1.0 / (cfg.sigma_halflife_days * P))  # sigma decay per row
    al = 0.5 ** (1.0 / (cfg.level_halflife_days * P))  # traffic level decay per row
    hold_rows = cfg.hold_days * P
    k = cfg.band_k
    floor = cfg.band_floor

    # Slot states: EWMA numerators (adjust=True form) and weights.
    num = {c: np.zeros((S, N)) for c in COMPONENTS}
    wgt = {c: np.zeros((S, N)) for c in ("cr", "gpu_hours", "tokens")}
    nobs = np.zeros((S, N))
    shadow = {c: np.zeros((S, N)) for c in COMPONENTS}
    shadow_w = {c: np.zeros((S, N)) for c in ("cr", "gpu_hours", "tokens")}
    run = np.zeros(N)
    # Sigma states per series: sums of squared log residuals and weights.
    # Traffic level per series: EWMA of ln(R / R_slot) over accepted rows.
    lvl_num = np.zeros(N)
    lvl_w = np.zeros(N)
    ss = {c: np.zeros(N) for c in ("u", "price", "fleet")}
    sw = {c: np.zeros(N) for c in ("u", "price", "fleet")}

    out = {
        name: np.full((n_days, P, N), np.nan)
        for name in (
            "cost_b", "gpu_hours_b", "tokens_b", "requests_b", "u", "baseline",
            "lower", "upper", "sigma", "sigma_price", "sigma_fleet",
        )
    }  # fmt: skip
    flags = {name: np.zeros((n_days, P, N), dtype=bool) for name in (
        "warm", "volume_ok", "flag", "held", "level_shift")}  # fmt: skip
    rows = np.arange(P)[:, None]

    with np.errstate(divide="ignore", invalid="ignore"):
        for d in range(n_days):
            sl = slot_grid[d]  # (P,) distinct slots within a day
            c, r, g, t, hol = C[d], R[d], G[d], T[d], H[d]
            w_cr = wgt["cr"][sl]
            cb = num["cost"][sl] / w_cr
            rb = num["requests"][sl] / w_cr
            gb = num["gpu_hours"][sl] / wgt["gpu_hours"][sl]
            tb = num["tokens"][sl] / wgt["tokens"][sl]
            rb_slot = rb
            # One factor for all four parts: u_b is untouched, but the parts
            # follow a launch within days instead of weeks of slot updates.
            level = np.exp(np.where(lvl_w > 0, lvl_num / lvl_w, 0.0))
            cb, rb, gb, tb = cb * level, rb * level, gb * level, tb * level
            valid = (c > 0) & (r > 0) & np.isfinite(c) & np.isfinite(r)
            u = np.where(valid, 1000.0 * c / r, np.nan)
            ub = np.where(w_cr > 0, 1000.0 * cb / rb, np.nan)
            has_b = w_cr > 0
            vol = valid & (r >= cfg.min_requests)
            warm = nobs[sl] >= cfg.min_obs

            def rms(name: str) -> np.ndarray:
                return np.sqrt(np.where(sw[name] > 0, ss[name] / sw[name], np.nan))

            sig = np.fmax(rms("u"), floor)  # NaN sigma (no history) -> floor
            upper = ub * np.exp(k * sig)
            lower = ub * np.exp(-k * sig)
            flag = warm & vol & has_b & ((u > upper) | (u < lower))
            held = valid & (flag | hol)
            accept = valid & ~held

            o = out
            o["cost_b"][d], o["requests_b"][d] = cb, rb
            o["gpu_hours_b"][d], o["tokens_b"][d] = gb, tb
            o["u"][d], o["baseline"][d] = u, ub
            o["lower"][d], o["upper"][d] = lower, upper
            o["sigma"][d] = np.broadcast_to(sig, (P, N))
            o["sigma_price"][d] = np.broadcast_to(np.fmax(rms("price"), floor), (P, N))
            o["sigma_fleet"][d] = np.broadcast_to(np.fmax(rms("fleet"), floor), (P, N))
            flags["warm"][d], flags["volume_ok"][d] = warm, vol
            flags["flag"][d], flags["held"][d] = flag, held

            # Sigma learns from accepted, volume-ok rows that had a baseline.
            learn = accept & vol & has_b
            g_ok = learn & (g > 0) & (gb > 0)
            resid = {
                "u": np.where(learn, np.log(u / ub), 0.0),
                "price": np.where(g_ok, np.log((c / g) / (cb / gb)), 0.0),
                "fleet": np.where(g_ok, np.log(g / gb), 0.0),
            }
            masks = {"u": learn, "price": g_ok, "fleet": g_ok}
            for name, res in resid.items():
                m = masks[name].sum(axis=0)
                decay = av**m
                ss[name] = decay * ss[name] + (res**2).sum(axis=0)
                sw[name] = decay * sw[name] + m
            m = learn.sum(axis=0)
            decay = al**m
            lvl_num = decay * lvl_num + np.where(learn, np.log(r / rb_slot), 0.0).sum(
                axis=0
            )
            lvl_w = decay * lvl_w + m

            # Slot update (slots are distinct within a day: plain fancy indexing).
            _update(num, wgt, sl, accept, c, r, g, t, a)
            nobs[sl] += accept

            # Run of held rows per series, in row order within the day.
            any_acc = accept.any(axis=0)
            last_acc = np.where(any_acc, P - 1 - np.argmax(accept[::-1], axis=0), -1)
            after = rows > last_acc[None, :]
            held_after = held & after
            run = np.where(any_acc, held_after.sum(axis=0), run + held.sum(axis=0))
            for name in COMPONENTS:
                shadow[name][:, any_acc] = 0.0
            for name in shadow_w:
                shadow_w[name][:, any_acc] = 0.0
            _update(shadow, shadow_w, sl, held_after, c, r, g, t, a)

            shift = run >= hold_rows
            if shift.any():
                # The held values are the new level of the slots they reached.
                for wname, comps in (("cr", ("cost", "requests")),
                                     ("gpu_hours", ("gpu_hours",)),
                                     ("tokens", ("tokens",))):  # fmt: skip
                    take = (shadow_w[wname] > 0) & shift[None, :]
                    for name in comps:
                        num[name] = np.where(take, shadow[name], num[name])
                    wgt[wname] = np.where(take, shadow_w[wname], wgt[wname])
                flags["level_shift"][d][:, shift] = True
                run[shift] = 0.0
                lvl_num[shift] = 0.0
                lvl_w[shift] = 0.0
                for name in COMPONENTS:
                    shadow[name][:, shift] = 0.0
                for name in shadow_w:
                    shadow_w[name][:, shift] = 0.0

    return {**out, **flags}


def _update(
    num: dict[str, np.ndarray],
    wgt: dict[str, np.ndarray],
    sl: np.ndarray,
    mask: np.ndarray,
    c: np.ndarray,
    r: np.ndarray,
    g: np.ndarray,
    t: np.ndarray,
    a: float,
) -> None:
    """EWMA update (adjust=True: numerator and weight decay, then add) of the
    slots ``sl`` where ``mask``; GPU-hours and tokens only where present."""
    g_ok = mask & np.isfinite(g) & (g >= 0)
    t_ok = mask & np.isfinite(t) & (t >= 0)
    for name, x, m in (
        ("cost", c, mask),
        ("requests", r, mask),
        ("gpu_hours", g, g_ok),
        ("tokens", t, t_ok),
    ):
        cur = num[name][sl]
        num[name][sl] = np.where(m, a * cur + np.where(m, x, 0.0), cur)
    for wname, m in (("cr", mask), ("gpu_hours", g_ok), ("tokens", t_ok)):
        cur = wgt[wname][sl]
        wgt[wname][sl] = np.where(m, a * cur + 1.0, cur)


def warmup_days(config: BaselineConfig) -> int:
    """Days of history a new series needs before every slot can flag."""
    kind = config.slot_kind()
    if kind in ("weekday", "hour_of_week"):
        return 7 * config.min_obs
    if kind == "daytype_hour":
        # Weekend slots see 2 rows a week.
        return 7 * math.ceil(config.min_obs / 2)
    return config.min_obs
