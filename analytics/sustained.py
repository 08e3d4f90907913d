"""The sustained-shift detector: a one-sided CUSUM beside the band.

The band (``analytics.baselines``) judges each period alone, so a small step
that lasts (cost +20% for a week at unchanged traffic) is caught on the days
it clears ``k x sigma`` and missed on the days its noise lands it just inside.
This detector accumulates the evidence instead. Per series, period after
period, on the log-likelihood ratio of a rise of the unit cost by ``d``
(``sustained_shift``, in ln u) against none::

    z = d * (ln(u / u_b) - d / 2) / sigma^2
    S = min(max(0, S + z), h + cap)
    held = S > h

``sigma`` is the band's own sigma of ln u (the series' residual scale, with
only a low floor), widened where the slot's baseline rests on few
observations: ``sigma^2 * (1 + sustained_base / w)``, ``w`` the slot's EWMA
weight (small after a fall's rescale, a level shift or warm-up, when the
baseline is itself uncertain). The allowance is ``d / 2`` in ln u whatever
the noise, and evidence counts by ``1 / sigma^2``: a quiet series needs a
day or two just over ``d / 2``, a noisy one several. ``h`` is the decision
interval. The cap keeps ``S`` from growing through a long step, so that it
falls back under ``h`` within a period of the step's end instead of
lingering for as many periods as it lasted. Only rises accumulate: a fall is
never a cost anomaly (it is a saving, or data to check:
``analytics.anomalies``).

A period the detector holds is flagged like one outside the band: kept out
of the baseline's update (so the step does not teach the baseline that it is
normal) and counted in the held run that becomes a level shift. A period
with no unit cost, under the minimum volume or before warm-up neither adds
nor resets: ``S`` passes over it unchanged.

Pure numpy; one step per period for every series at once.
"""

from __future__ import annotations

import numpy as np

from analytics.baseline_state import BaselineConfig

# The sum must pass h by this much (nats) to hold: a series and its copy at
# another scale differ in the last bits of every residual, and a sum that
# sits on h (a run of identical values can put it there) must decide alike.
TIE = 1e-9


def cusum_step(
    s: np.ndarray,
    z: np.ndarray,
    judged: np.ndarray,
    *,
    k: float,
    h: float,
    cap: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One period of the CUSUM for every series: the new sums and which
    series the detector holds in this period. ``judged``: the period has a
    unit cost, the volume and a warm baseline (others leave ``s`` as it was
    and are not held). ``h <= 0`` disables the detector (nothing held)."""
    if h <= 0:
        return s, np.zeros(np.shape(s), dtype=bool)
    step = np.where(judged, np.nan_to_num(z, nan=0.0) - k, 0.0)
    new = np.where(judged, np.minimum(np.maximum(s + step, 0.0), h + cap), s)
    return new, judged & (new > h + TIE)


def evidence(
    dev: np.ndarray, raw: np.ndarray, weight: np.ndarray, cfg: BaselineConfig
) -> np.ndarray:
    """The log-likelihood ratio of a rise by ``sustained_shift`` (in ln u)
    against none, per period: ``d (dev - d / 2) / sigma^2``. ``dev``: the log
    residual ``ln(u / u_b)``; ``raw``: the band's sigma of it, before the
    band's floor; ``weight``: the EWMA weight of the slot's baseline."""
    d = cfg.sustained_shift
    var = np.fmax(raw, cfg.sustained_floor) ** 2 * (1.0 + cfg.sustained_base / weight)
    return d * (dev - d / 2) / var


def sustained_day(
    s: np.ndarray, z: np.ndarray, judged: np.ndarray, cfg: BaselineConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The periods of one day, (period, series) arrays, in order: the sums
    after the day and which periods the detector holds. ``z``: the
    ``evidence`` of each period."""
    held = np.zeros(judged.shape, dtype=bool)
    for p in range(judged.shape[0]):
        s, held[p] = cusum_step(
            s, z[p], judged[p], k=0.0, h=cfg.sustained_h,
            cap=cfg.sustained_cap,
        )  # fmt: skip
    return s, held


def settled_runs(
    flag: np.ndarray,
    sustained: np.ndarray,
    band: np.ndarray,
    ln_u: np.ndarray,
    base: np.ndarray,
    ready: np.ndarray,
    valid: np.ndarray,
    quiet: np.ndarray,
    cfg: BaselineConfig,
) -> dict[str, np.ndarray]:
    """``flag``, ``sustained`` and ``pending`` (a hold that the next period
    will confirm or withdraw) once each period's neighbours are known, as
    (day, period, series) grids like the day loop's: ``band`` the periods
    outside the band, ``ln_u`` and ``base`` (the parts' baselines, cost and
    requests first) give ``ln(u / u_b)``, ``ready``: warm with the volume.
    A period in progress is left out of ``valid`` by the caller: it settles
    no neighbour, and the one before it stays pending.

    - A period the detector holds alone (inside the band) is a rise only
      next to another (a rise: flagged, its ``ln(u / u_b)`` over ``d / 2``):
      one noisy day can cross ``h`` but is no sustained shift. It stays
      flagged if the period after it is a rise, or if the period before it
      is and its own ``ln(u / u_b)`` is over ``d / 2``
      (a run's last day, not the normal day after it that the sum, still
      high, carried over). The last period of a series (nothing after it
      yet, or only a period in progress) keeps its hold, pending.
    - The period before a rise run whose ``ln(u / u_b)`` was already over
      ``d / 2`` (where the sum began to grow) is flagged with it: the run
      began there, and a step's first day is the one a detector judging
      each day as it comes misses most.

    So a period's flag settles once the two after it are judged; the
    recompute rewrites them (``analytics.unit_cost_resume``). ``quiet``:
    periods that neither begin nor extend a run (holidays, one-off amounts);
    neighbours are the series' next and previous ``valid`` periods."""
    n_days, per_day, n = flag.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = ln_u - np.log(1000.0 * base[0] / base[1])
    judged = ready & np.isfinite(dev)
    grids = (flag, sustained, band, dev, judged, valid, quiet)
    found = _confirmed([g.reshape(n_days * per_day, n) for g in grids], cfg)
    return {k: g.reshape(n_days, per_day, n) for k, g in found.items()}


def _confirmed(grids: list[np.ndarray], cfg: BaselineConfig) -> dict[str, np.ndarray]:
    """``settled_runs`` on (period, series) arrays in time order: the flags,
    holds, band flags, ``ln(u / u_b)``, judged, valid and quiet periods."""
    flag, sustained, band, dev, judged, valid, quiet = grids
    n, width = flag.shape
    steps = np.arange(n)[:, None]
    after = np.minimum.accumulate(np.where(valid, steps, n)[::-1], axis=0)[::-1]
    before = np.maximum.accumulate(np.where(valid, steps, -1), axis=0)
    nxt = np.vstack([after[1:], np.full((1, width), n)])
    prv = np.vstack([np.full((1, width), -1), before[:-1]])
    cols = np.arange(width)[None, :]

    def at(arr: np.ndarray, where: np.ndarray, missing: bool) -> np.ndarray:
        """``arr`` at each period's neighbour; ``missing`` where it has none."""
        found = arr[np.clip(where, 0, n - 1), cols]
        return np.where((where < 0) | (where >= n), missing, found)

    # A neighbour that confirms points up past d / 2 itself (not a day the
    # sum merely carried, nor a tie at the baseline that rounding can flip).
    edge = cfg.sustained_shift / 2
    up = (dev > edge) & ~quiet
    rise = flag & up
    alone = sustained & ~band
    after_rise = at(rise, prv, False) & (dev > edge)
    keep = ~alone | at(rise, nxt, True) | after_rise
    flag = flag & keep
    first = judged & ~flag & up & at(flag & up, nxt, False)
    return {
        "flag": flag | first,
        "sustained": (sustained & keep) | first,
        "pending": alone & keep & (nxt >= n) & ~after_rise,
    }
