"""Labelled daily series for the directions and the sustained detector.

The second anomaly benchmark (the first is ``bench/anomaly_series.py``): only
what a bill and a request counter give, daily cost and finished requests, one
series per seed unless asked for more. Written before the detector was tuned;
tuning reads seeds 0-99 only, the figures in docs/baselines.md are seeds
1000-1199.

Each series has:

- a traffic level (10^4.5 to 10^6.5 requests a day) and $0.2 to $2 per 1k;
- a weekly pattern: weekend traffic 0.5x to 0.95x, cost following a share
  (0 to 0.6) of it (partial autoscaling);
- noise: cost lognormal with a sigma drawn from 3% to 6% per series, traffic
  2%;
- holiday dips (2 to 4, marked ``holiday``): traffic 0.45x to 0.8x, cost
  unchanged;
- events after day 35, never overlapping (3 clear days around each):
  * ``price_cut``: cost 0.7x to 0.9x for good (unmarked);
  * ``savings_plan``: cost 0.75x to 0.85x for good (unmarked);
  * ``step``: cost 1.18x to 1.25x for 3 to 10 days at unchanged traffic;
  * ``regression``: traffic 1.03x to 1.08x while cost rises by that and
    1.18x to 1.25x more (3 to 8 times as fast in log terms), for 3 to 10
    days.

Labels: ``label`` is 1 on the days of a step or a regression (the rises);
every other day, falls and holidays included, is 0. ``kind`` names the event
active on a day (a permanent fall: its first day only, ``change`` counts the
price changes).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

START = pd.Timestamp("2025-01-06")  # a Monday
WARMUP_DAYS = 28
RISES = ("step", "regression")
FALLS = ("price_cut", "savings_plan")


def generate(seed: int, *, n_series: int = 1, n_days: int = 182) -> pd.DataFrame:
    """``series, day, cost, requests, holiday, label, kind, after_fall,
    noise``: ``after_fall`` marks the days of the 28 from a fall's first day
    that are not a rise, ``noise`` the series' cost sigma."""
    rng = np.random.default_rng(seed)
    days = pd.date_range(START, periods=n_days)
    weekend = np.asarray(days.weekday >= 5)
    frames = []
    for i in range(n_series):
        level = 10 ** rng.uniform(4.5, 6.5)
        per_1k = rng.uniform(0.2, 2.0)
        weekend_factor = rng.uniform(0.5, 0.95)
        follow = rng.uniform(0.0, 0.6)
        noise = rng.uniform(0.03, 0.06)
        traffic = np.where(weekend, weekend_factor, 1.0)
        cost = np.where(weekend, 1 - follow + follow * weekend_factor, 1.0)

        holiday = np.zeros(n_days, dtype=bool)
        label = np.zeros(n_days, dtype=int)
        kind = np.full(n_days, "", dtype=object)
        falls: list[int] = []
        busy = np.zeros(n_days, dtype=bool)
        plan = ["holiday"] * int(rng.integers(2, 5))
        plan += list(rng.choice([*FALLS], size=int(rng.integers(1, 3))))
        plan += list(rng.choice([*RISES], size=int(rng.integers(3, 6))))
        for what in rng.permutation(np.asarray(plan, dtype=object)):
            length = 1 if what == "holiday" else int(rng.integers(3, 11))
            for _try in range(50):
                start = int(rng.integers(35, n_days - length - 3))
                span = slice(start - 3, start + length + 3)
                if not busy[span].any():
                    break
            else:
                continue
            busy[span] = True
            sl = slice(start, start + length)
            if what == "holiday":
                holiday[sl] = True
                traffic[sl] *= rng.uniform(0.45, 0.8)
            elif what in FALLS:
                low, high = (0.7, 0.9) if what == "price_cut" else (0.75, 0.85)
                cost[start:] *= rng.uniform(low, high)
                kind[start] = str(what)
                falls.append(start)
            else:
                # Both rises move the unit cost by +18% to +25%.
                grow = 1.0 if what == "step" else rng.uniform(1.03, 1.08)
                traffic[sl] *= grow
                cost[sl] *= grow * rng.uniform(1.18, 1.25)
                label[sl] = 1
                kind[sl] = str(what)
        frames.append(
            pd.DataFrame(
                {
                    "series": f"s{seed:04d}-{i:02d}",
                    "day": days,
                    "cost": (level * per_1k / 1000)
                    * cost
                    * rng.lognormal(0, noise, n_days),
                    "requests": level * traffic * rng.lognormal(0, 0.02, n_days),
                    "holiday": holiday,
                    "label": label,
                    "kind": kind,
                    "after_fall": _after(falls, n_days) & (label == 0),
                    "noise": noise,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _after(starts: list[int], n_days: int) -> np.ndarray:
    out = np.zeros(n_days, dtype=bool)
    for start in starts:
        out[start : start + 28] = True
    return out


def generate_many(seeds: Iterable[int], **kw: int) -> pd.DataFrame:
    return pd.concat([generate(s, **kw) for s in seeds], ignore_index=True)


def score(series: pd.DataFrame, flag: pd.Series | np.ndarray) -> dict[str, float]:
    """Day-level scores after the warm-up: precision and recall of ``anomaly``
    on the rises, and the days flagged ``anomaly`` (and ``saving`` or
    ``check``) per price change, over the days from each fall on."""
    flags = np.asarray(flag, dtype=object)
    after = np.asarray(
        pd.DatetimeIndex(series["day"]) >= START + pd.Timedelta(days=WARMUP_DAYS)
    )
    label = series["label"].to_numpy() == 1
    hit = (flags == "anomaly") & after
    tp = int((hit & label).sum())
    fp = int((hit & ~label).sum())
    fn = int((~hit & label & after).sum())
    kinds = series["kind"].to_numpy()
    changes = int(np.isin(kinds, FALLS).sum())
    in_fall = series["after_fall"].to_numpy(bool)
    per_change = max(changes, 1)
    return {
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "rise_days": float(tp + fn),
        "false_days": float(fp),
        "price_changes": float(changes),
        "anomaly_per_change": float(((flags == "anomaly") & in_fall).sum())
        / per_change,
        "saving_per_change": float(np.isin(flags, ("saving", "check"))[in_fall].sum())
        / per_change,
        "holiday_anomalies": float(
            ((flags == "anomaly") & series["holiday"].to_numpy()).sum()
        ),
    }
