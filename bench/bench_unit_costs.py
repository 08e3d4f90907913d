"""Speed: unit costs, baselines and anomaly flags for 200 deployments x 1 year
of hours, against one bare pandas groupby + ewm pass over the same frame.

The floor is the cheapest thing that could be called "an EWMA baseline for
every series": ``frame.groupby("series")["cost"].ewm(halflife=...).mean()``,
one column, no seasonality, no band, no hold-out. costapp's pass is
``analytics.unit_costs.unit_costs`` + ``analytics.anomalies.detect`` (hourly
baselines with weekday/weekend x hour slots, bands, flags, LMDI parts and
sentences for the flagged rows). Both run on the same frame in the same
process; the figure is the ratio of medians over ``--repeat`` runs (goal:
within 3x). Not run by CI (``--smoke`` is).

    .venv/bin/python bench/bench_unit_costs.py [--repeat 5] [--series 200] [--days 365]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.anomalies import detect
from analytics.baselines import BaselineConfig, baselines_run
from analytics.unit_costs import unit_costs


def hourly_frame(n_series: int, n_days: int, seed: int = 0) -> pd.DataFrame:
    """Diurnal and weekly traffic, a fleet that half follows it, a few
    injected cost steps; one row per series and hour."""
    rng = np.random.default_rng(seed)
    hours = pd.date_range("2025-01-06", periods=n_days * 24, freq="h")
    n = len(hours)
    hour = np.asarray(hours.hour)
    weekend = np.asarray(hours.weekday >= 5)
    diurnal = 0.55 + 0.45 * np.sin((hour - 6) / 24 * 2 * np.pi).clip(0) + 0.1
    frames = []
    for i in range(n_series):
        level = 10 ** rng.uniform(2.5, 4.5)
        traffic = diurnal * np.where(weekend, rng.uniform(0.5, 0.9), 1.0)
        requests = level * traffic * rng.lognormal(0, 0.05, n)
        tokens = requests * rng.uniform(150, 1200) * rng.lognormal(0, 0.03, n)
        gpu = level / 500 * (0.5 + 0.5 * traffic) * rng.lognormal(0, 0.03, n)
        cost = gpu * rng.uniform(1.5, 4.5)
        start = int(rng.integers(24 * 40, n - 24 * 5))
        cost[start : start + 24 * 3] *= 1.4
        frames.append(
            pd.DataFrame(
                {
                    "series": f"d{i:03d}",
                    "period_start": hours,
                    "cost": cost,
                    "gpu_hours": gpu,
                    "tokens": tokens,
                    "requests": requests,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def costapp_pass(
    frame: pd.DataFrame, *, sentences: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Unit figures and flags: two frames on the frame's index, as stored."""
    figures = unit_costs(frame)
    flags = detect(
        frame,
        time="period_start",
        config=BaselineConfig(grain="hour"),
        sentences=sentences,
    )
    return figures, flags


def costapp_with_sentences(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    return costapp_pass(frame, sentences=True)


def bare_pass(frame: pd.DataFrame) -> pd.Series:
    return frame.groupby("series", sort=False)["cost"].ewm(halflife=48).mean()


def timed(fn, frame: pd.DataFrame) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(frame)
    return time.perf_counter() - t0, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--smoke", action="store_true", help="5 series x 60 days, 1 run"
    )
    args = parser.parse_args()
    if args.smoke:
        args.series, args.days, args.repeat = 5, 60, 1

    frame = hourly_frame(args.series, args.days)
    ours, bare, full = [], [], []
    result = None
    for _ in range(args.repeat):
        t, _out = timed(bare_pass, frame)
        bare.append(t)
        t, result = timed(costapp_pass, frame)
        ours.append(t)
        t, _out = timed(costapp_with_sentences, frame)
        full.append(t)
    assert isinstance(result, tuple)
    m_ours, m_bare = statistics.median(ours), statistics.median(bare)
    m_full = statistics.median(full)
    # The machine is shared: each run is a ratio against the floor measured
    # just before it, and the figure is the median of those ratios.
    r_ours = statistics.median(a / b for a, b in zip(ours, bare, strict=True))
    r_full = statistics.median(a / b for a, b in zip(full, bare, strict=True))
    flagged = int((result[1]["flag"] != "").sum())
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"pandas {pd.__version__}, numpy {np.__version__}")  # fmt: skip
    print(f"{args.series} series x {args.days} days hourly = {len(frame):,} rows; "
          f"{args.repeat} runs; {flagged} rows flagged")  # fmt: skip
    print()
    print("| measurement | median | floor (median) | median of per-run ratios |")
    print("| --- | --- | --- | --- |")
    print(f"| unit costs + baselines + flags (classed by LMDI) | {m_ours:.3f} s | "
          f"groupby + ewm, one column: {m_bare:.3f} s | {r_ours:.2f}x |")  # fmt: skip
    print(f"| the same + a sentence per flagged hour | {m_full:.3f} s | "
          f"groupby + ewm, one column: {m_bare:.3f} s | {r_full:.2f}x |")  # fmt: skip
    print()
    print(
        "runs (costapp / with sentences / floor):",
        ", ".join(
            f"{a:.3f}/{c:.3f}/{b:.3f}" for a, b, c in zip(ours, bare, full, strict=True)
        ),
    )
    print(
        "per-run ratios:",
        ", ".join(f"{a / b:.2f}x" for a, b in zip(ours, bare, strict=True)),
    )
    incremental_report(frame, repeat=args.repeat)
    return 0


def incremental_report(frame: pd.DataFrame, *, repeat: int) -> None:
    """One restated day (20 days before the end: the previous month is
    restated until it closes) for one deployment and its 3 pool siblings:
    recompute from the checkpoint at the start of that day's month, for those
    4 series, against the full recompute of every series."""
    cfg = BaselineConfig(grain="hour")
    last = pd.Timestamp(frame["period_start"].max()).normalize()
    restated_day = last - pd.Timedelta(days=20)
    checkpoint = restated_day.replace(day=1)
    stored = baselines_run(frame, config=cfg, checkpoints=[checkpoint])
    names = sorted(frame["series"].unique())[:4]
    restated = frame.copy()
    hit = (restated["series"] == names[0]) & (
        restated["period_start"].dt.normalize() == restated_day
    )
    restated.loc[hit, "cost"] *= 1.1
    state = stored.checkpoints[checkpoint].select([(n,) for n in names])
    rows = restated[
        restated["series"].isin(names) & (restated["period_start"] >= checkpoint)
    ]

    def full_pass(f: pd.DataFrame) -> pd.DataFrame:
        unit_costs(f)
        return detect(f, time="period_start", config=cfg, sentences=False)

    def incremental_pass(f: pd.DataFrame) -> pd.DataFrame:
        unit_costs(f)
        return detect(
            f, time="period_start", config=cfg, sentences=False, initial=state
        )

    t_full, t_inc = [], []
    ref = inc = None
    for _ in range(repeat):
        t, ref = timed(full_pass, restated)
        t_full.append(t)
        t, inc = timed(incremental_pass, rows)
        t_inc.append(t)
    assert isinstance(ref, pd.DataFrame) and isinstance(inc, pd.DataFrame)
    diff = np.nanmax(
        np.abs(inc["baseline"].to_numpy() - ref.loc[rows.index, "baseline"].to_numpy())
    )
    m_full, m_inc = statistics.median(t_full), statistics.median(t_inc)
    print()
    print(f"| incremental recompute after one restated day ({len(names)} series from "
          f"{checkpoint.date()}, {len(rows):,} rows) | {m_inc:.3f} s | full recompute: "
          f"{m_full:.3f} s | {m_full / m_inc:.0f}x faster |")  # fmt: skip
    print(f"largest |incremental - full| baseline: {diff:.3g}")


if __name__ == "__main__":
    raise SystemExit(main())
