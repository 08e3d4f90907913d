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
    return new, judged & (new > h)


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
