"""Forecast backtest: rolling-origin month-end spend forecasts.

Daily cost series from the anomaly benchmark's generator (bench/anomaly_series.py:
weekly pattern, drift, launches, holidays, injected cost steps and spikes), one
year each. For every (series, month) pair with at least 8 weeks of history
before the month, ``analytics.forecast.forecast_month`` is run as of several
days of the month (the origin: spend known up to and including that day) and
compared with the month's actual total:

- MAPE of the point forecast by day of month;
- coverage of the 80% interval (share of actual totals inside it), overall and
  by day of month (goal: 75-85%).

Not run by CI (``--smoke`` is).

    .venv/bin/python bench/bench_forecast.py [--series 40] [--seeds 300-301]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.forecast import WIDEN, forecast_month
from bench.anomaly_series import generate

ORIGINS = (1, 8, 15, 22, 28)


def backtest(
    days: pd.DataFrame,
    *,
    months: list[pd.Timestamp],
    origins: tuple[int, ...],
    repetitions: int,
) -> pd.DataFrame:
    rows = []
    for name, group in days.groupby("series", sort=True):
        g = group[["day", "cost"]]
        for month in months:
            end = month + pd.offsets.MonthEnd(0)
            actual = g[(g["day"] >= month) & (g["day"] <= end)]["cost"].sum()
            for dom in origins:
                as_of = month + pd.Timedelta(days=dom - 1)
                # ETS's own interval; the calibrated one is derived below
                # (quantiles are affine-equivariant, so this equals widen=WIDEN).
                f = forecast_month(
                    g, as_of=as_of, repetitions=repetitions, seed=0, widen=None
                )
                rows.append(
                    {
                        "series": name,
                        "month": month,
                        "day_of_month": dom,
                        "actual": actual,
                        "point": f.point,
                        "lower": f.lower,
                        "upper": f.upper,
                        "method": f.method,
                        "remaining": f.remaining_days,
                    }
                )
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="300-301")
    parser.add_argument("--series", type=int, default=12, help="series per seed")
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument(
        "--smoke", action="store_true", help="1 series, 1 month, 1 origin"
    )
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    if args.smoke:
        seeds, args.series, args.repetitions = seeds[:1], 1, 100
    frames = [generate(s, n_series=args.series, n_days=365) for s in seeds]
    days = pd.concat(frames, ignore_index=True)[["series", "day", "cost"]]
    # The generator starts 2025-01-06: months from March have >= 8 weeks before.
    months = [pd.Timestamp(f"2025-{m:02d}-01") for m in range(3, 13)]
    origins = ORIGINS
    if args.smoke:
        months, origins = months[:1], (15,)
    t0 = time.perf_counter()
    res = backtest(days, months=months, origins=origins, repetitions=args.repetitions)
    elapsed = time.perf_counter() - t0
    res["ape"] = (res["point"] - res["actual"]).abs() / res["actual"].abs()
    res["covered_ets"] = (res["actual"] >= res["lower"]) & (
        res["actual"] <= res["upper"]
    )
    scale = (WIDEN[0] + WIDEN[1] * res["remaining"]).clip(lower=1.0)
    lower = res["point"] + scale * (res["lower"] - res["point"])
    upper = res["point"] + scale * (res["upper"] - res["point"])
    res["covered"] = (res["actual"] >= lower) & (res["actual"] <= upper)
    pairs = res.groupby(["series", "month"]).ngroups
    print(f"{days['series'].nunique()} series, {len(months)} months: {pairs} (series, month) "
          f"pairs, {len(res)} forecasts, {args.repetitions} paths each; {elapsed:.0f} s")  # fmt: skip
    print(f"methods: {res['method'].value_counts().to_dict()}")
    print()
    print("| as of day | MAPE | median APE | 80% coverage (calibrated) | ETS's own |")
    print("| --- | --- | --- | --- | --- |")
    for dom, g in [*res.groupby("day_of_month"), ("all", res)]:
        print(
            f"| {dom} | {g['ape'].mean():.2%} | {g['ape'].median():.2%} | "
            f"{g['covered'].mean():.1%} | {g['covered_ets'].mean():.1%} |"
        )
    late = res[res["day_of_month"] >= 15]
    print()
    print(
        f"from the 15th: MAPE {late['ape'].mean():.2%}, coverage {late['covered'].mean():.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
