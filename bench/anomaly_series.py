"""The anomaly benchmark's series and labels (committed before any tuning).

Each seed gives ``n_series`` deployments x ``n_days`` days of daily cost,
GPU-hours, tokens and finished requests, built from these ingredients:

- a traffic level (10^4.5 to 10^6.5 requests a day), tokens per request (150
  to 1,200) and a fleet sized for the traffic at $1.5 to $4.5 per GPU-hour;
- a weekly pattern: weekend traffic 0.45x to 0.95x of weekdays, with the
  fleet following a share (0 to 0.6) of it (partial autoscaling);
- slow drift: traffic -25% to +40% over the period (exponential), the fleet
  following half of it; price drift -5% to +5%;
- noise: traffic 3%, fleet 2%, tokens per request 2%, price 1% (lognormal,
  daily);
- holidays: 3 to 5 days with traffic 0.45x to 0.8x and the fleet unchanged,
  marked in the ``holiday`` column (a calendar the user keeps);
- launches (half the series): traffic and fleet up together 1.3x to 2x
  from a day on (cost up, unit cost about unchanged);
- injected anomalies, 3 to 5 per series, never overlapping, after day 35:
  * ``step``: GPU-hours (replicas) or price 1.25x to 1.6x for 2 to 7 days
    at unchanged traffic;
  * ``spike``: one day of cost 1.3x to 2x at unchanged traffic;
  * ``hidden``: traffic +10% while cost is +50% (2 to 5 days).

Labels (defined here, before any detector was tuned): a deployment-day is a
positive (``label`` = 1) exactly when one injected anomaly is active on it;
weekends, holidays, launches, drift and noise are negatives. Scoring
(bench_anomalies.py) is day-level after the warm-up (``WARMUP_DAYS``): a
predicted positive is a day flagged ``anomaly`` (a cost anomaly).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WARMUP_DAYS = 28
START = pd.Timestamp("2025-01-06")  # a Monday


def generate(seed: int, *, n_series: int = 20, n_days: int = 182) -> pd.DataFrame:
    """One seed's series: ``series, day, cost, gpu_hours, tokens, requests,
    holiday, label, kind`` (``kind``: the injection active that day, or "")."""
    rng = np.random.default_rng(seed)
    days = pd.date_range(START, periods=n_days)
    weekend = np.asarray(days.weekday >= 5)
    t = np.arange(n_days) / max(n_days - 1, 1)
    frames = []
    for i in range(n_series):
        level = 10 ** rng.uniform(4.5, 6.5)
        size = rng.uniform(150, 1200)
        price0 = rng.uniform(1.5, 4.5)
        weekend_factor = rng.uniform(0.45, 0.95)
        follow = rng.uniform(0.0, 0.6)
        drift = np.exp(np.log(1 + rng.uniform(-0.25, 0.40)) * t)
        price_drift = np.exp(np.log(1 + rng.uniform(-0.05, 0.05)) * t)

        traffic = np.where(weekend, weekend_factor, 1.0) * drift
        fleet = (
            np.where(weekend, 1 - follow + follow * weekend_factor, 1.0) * drift**0.5
        )

        holiday = np.zeros(n_days, dtype=bool)
        for d in rng.choice(
            np.arange(WARMUP_DAYS, n_days), size=rng.integers(3, 6), replace=False
        ):
            holiday[d] = True
            traffic[d] *= rng.uniform(0.45, 0.8)

        if rng.random() < 0.5:
            launch = int(rng.integers(40, n_days - 20))
            boost = rng.uniform(1.3, 2.0)
            traffic[launch:] *= boost
            fleet[launch:] *= boost

        requests = level * traffic * rng.lognormal(0, 0.03, n_days)
        tokens = requests * size * rng.lognormal(0, 0.02, n_days)
        # GPU-hours for the traffic at the start: about 1 GPU-hour per 2M tokens.
        gpu_hours = level * size / 2e6 * fleet * rng.lognormal(0, 0.02, n_days)
        price = price0 * price_drift * rng.lognormal(0, 0.01, n_days)

        label = np.zeros(n_days, dtype=int)
        kind = np.full(n_days, "", dtype=object)
        busy = holiday.copy()  # injections avoid holidays (one cause per day)
        for _ in range(int(rng.integers(3, 6))):
            what = rng.choice(["step", "spike", "hidden"], p=[0.5, 0.25, 0.25])
            length = {
                "step": int(rng.integers(2, 8)),
                "spike": 1,
                "hidden": int(rng.integers(2, 6)),
            }[what]
            for _try in range(50):
                start = int(rng.integers(35, n_days - length))
                span = slice(max(start - 3, 0), start + length + 3)
                if not busy[span].any():
                    break
            else:
                continue
            busy[span] = True
            sl = slice(start, start + length)
            if what == "step":
                factor = rng.uniform(1.25, 1.6)
                if rng.random() < 0.6:
                    gpu_hours[sl] *= factor  # more replicas
                else:
                    price[sl] *= factor
            elif what == "spike":
                price[sl] *= rng.uniform(1.3, 2.0)
            else:
                requests[sl] *= 1.1
                tokens[sl] *= 1.1
                gpu_hours[sl] *= 1.5
            label[sl] = 1
            kind[sl] = str(what)

        frames.append(
            pd.DataFrame(
                {
                    "series": f"s{seed:03d}-{i:02d}",
                    "day": days,
                    "cost": price * gpu_hours,
                    "gpu_hours": gpu_hours,
                    "tokens": tokens,
                    "requests": requests,
                    "holiday": holiday,
                    "label": label,
                    "kind": kind,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def generate_many(seeds: range | list[int], **kw: int) -> pd.DataFrame:
    return pd.concat([generate(s, **kw) for s in seeds], ignore_index=True)
