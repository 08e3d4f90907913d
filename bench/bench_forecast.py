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

With ``--demo``, the same backtest on the demo fleet's series instead
(``costapp.sources.demo``, ``--demo-days`` days ending 2026-12-02, default
400): each workload's daily amortized bill (its Cost Explorer lines by the
``costapp:workload`` tag: the two pools, the deployments outside them and the
untagged rest) and the whole account, every month with 8 weeks before it.

Not run by CI (``--smoke`` is).

    .venv/bin/python bench/bench_forecast.py [--series 40] [--seeds 300-301]
    .venv/bin/python bench/bench_forecast.py --demo [--demo-days 400]
    .venv/bin/python bench/bench_forecast.py --both [--out forecasts.csv]

The demo's lines carry their record type: credits, refunds, taxes and fees
are forecast as lumps (``analytics.forecast.LUMP_TYPES``), the rest by ETS;
``--lumps-as-usage`` drops the record type (one model for everything, as
before) for comparison.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.forecast import LUMP_MONTHS, WIDEN, forecast_month
from bench.anomaly_series import generate

ORIGINS = (1, 8, 15, 22, 28)
DEMO_END = "2026-12-02"  # bills through 30 November (one day of lag)


def demo_days(days: int, seed: int = 7) -> pd.DataFrame:
    """The demo's daily bill per workload tag and for the account (amortized,
    every line of the day: usage, the RI fee, credits), as series, day, cost."""
    from datetime import UTC, datetime

    from costapp.sources.base import CostRecord
    from costapp.sources.demo import DemoSource, bills, telemetry
    from costapp.sources.demo.story import DEPLOYMENTS

    source = DemoSource(seed=seed, days=days, end=datetime.fromisoformat(DEMO_END)
                        .replace(tzinfo=UTC))  # fmt: skip
    simulated = [
        telemetry.simulate(i, spec, events=source.events, start=source.start,
                           days=source.days, seed=seed)
        for i, spec in enumerate(DEPLOYMENTS)
    ]  # fmt: skip
    t_first = int(source.start.timestamp())
    t_last = int(source.end.timestamp()) - bills.BILL_LAG_DAYS * 86_400
    rows = []
    for batch in bills.bill_batches(simulated, t_first, t_last, end=source.end):
        for r in batch.records:
            if isinstance(r, CostRecord) and r.amortized_cost is not None:
                rows.append((r.tag_value or "(untagged)",
                             pd.Timestamp(r.period_start).tz_convert(None),
                             r.record_type, float(r.amortized_cost)))  # fmt: skip
    lines = pd.DataFrame(rows, columns=["series", "day", "record_type", "cost"])
    by = ["series", "day", "record_type"]
    per_tag = lines.groupby(by, as_index=False)["cost"].sum()
    account = (
        lines.groupby(by[1:], as_index=False)["cost"].sum().assign(series="account")
    )
    return pd.concat([per_tag, account], ignore_index=True)[[*by, "cost"]]


def backtest(
    days: pd.DataFrame,
    *,
    months: list[pd.Timestamp],
    origins: tuple[int, ...],
    repetitions: int,
    lump_months: int = LUMP_MONTHS,
) -> pd.DataFrame:
    rows = []
    for name, group in days.groupby("series", sort=True):
        g = group.drop(columns="series")
        for month in months:
            end = month + pd.offsets.MonthEnd(0)
            actual = g[(g["day"] >= month) & (g["day"] <= end)]["cost"].sum()
            for dom in origins:
                as_of = month + pd.Timedelta(days=dom - 1)
                # ETS's own interval; the calibrated one is derived below
                # (quantiles are affine-equivariant, so this equals widen=WIDEN).
                f = forecast_month(
                    g, as_of=as_of, repetitions=repetitions, seed=0, widen=None,
                    lump_months=lump_months,
                )  # fmt: skip
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


def demo_months(days: pd.DataFrame) -> list[pd.Timestamp]:
    """Whole months with 8 weeks of bills before them."""
    first, last = days["day"].min(), days["day"].max()
    return [
        m for m in pd.date_range(first, last, freq="MS")
        if m - pd.Timedelta(weeks=8) >= first and m + pd.offsets.MonthEnd(0) <= last
    ]  # fmt: skip


def scored(res: pd.DataFrame) -> pd.DataFrame:
    """APE and coverage (ETS's own interval and the calibrated one). An
    interval of zero width (a constant series, lumps known) covers an actual
    equal to it up to float summation (1e-9 relative)."""
    res = res.copy()
    res["ape"] = (res["point"] - res["actual"]).abs() / res["actual"].abs()
    tol = 1e-9 * res["actual"].abs().clip(lower=1.0)
    res["covered_ets"] = (res["actual"] >= res["lower"] - tol) & (
        res["actual"] <= res["upper"] + tol
    )
    scale = (WIDEN[0] + WIDEN[1] * res["remaining"]).clip(lower=1.0)
    lower = res["point"] + scale * (res["lower"] - res["point"])
    upper = res["point"] + scale * (res["upper"] - res["point"])
    res["covered"] = (res["actual"] >= lower - tol) & (res["actual"] <= upper + tol)
    return res


def report(res: pd.DataFrame, title: str, *, per_series: bool) -> None:
    pairs = res.groupby(["source", "series", "month"]).ngroups
    print(f"### {title}: {pairs} (series, month) pairs, {len(res)} forecasts")
    print(f"methods: {res['method'].value_counts().to_dict()}")
    print()
    print("| as of day | MAPE | median APE | 80% coverage (calibrated) | ETS's own |")
    print("| --- | --- | --- | --- | --- |")
    for dom, g in [*res.groupby("day_of_month"), ("all", res)]:
        print(
            f"| {dom} | {g['ape'].mean():.2%} | {g['ape'].median():.2%} | "
            f"{g['covered'].mean():.1%} | {g['covered_ets'].mean():.1%} |"
        )
    if per_series:
        print()
        print("| series | mean monthly spend | MAPE | MAPE from the 15th | coverage |")
        print("| --- | --- | --- | --- | --- |")
        for name, g in res.groupby("series"):
            gl = g[g["day_of_month"] >= 15]
            print(f"| {name} | {g['actual'].mean():,.0f} | {g['ape'].mean():.2%} | "
                  f"{gl['ape'].mean():.2%} | {g['covered'].mean():.1%} |")  # fmt: skip
    late = res[res["day_of_month"] >= 15]
    print()
    print(f"from the 15th: MAPE {late['ape'].mean():.2%}, coverage "
          f"{late['covered'].mean():.1%} over {late.groupby(['source', 'series', 'month']).ngroups} pairs")  # fmt: skip
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="300-301")
    parser.add_argument("--series", type=int, default=12, help="series per seed")
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument(
        "--smoke", action="store_true", help="1 series, 1 month, 1 origin"
    )
    parser.add_argument("--demo", action="store_true", help="the demo's series only")
    parser.add_argument(
        "--both", action="store_true",
        help="the benchmark and the demo series, reported apart and together",
    )  # fmt: skip
    parser.add_argument("--demo-days", type=int, default=400)
    parser.add_argument(
        "--lumps-as-usage", action="store_true",
        help="ignore the record type (the single model of before, for comparison)",
    )  # fmt: skip
    parser.add_argument("--out", help="write every forecast to this CSV")
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    if args.smoke:
        seeds, args.series, args.repetitions = seeds[:1], 1, 100
        args.demo_days = 100
    sources: list[tuple[str, pd.DataFrame, list[pd.Timestamp]]] = []
    if not args.demo or args.both:
        frames = [generate(s, n_series=args.series, n_days=365) for s in seeds]
        days = pd.concat(frames, ignore_index=True)[["series", "day", "cost"]]
        # The generator starts 2025-01-06: months from March have >= 8 weeks.
        months = [pd.Timestamp(f"2025-{m:02d}-01") for m in range(3, 13)]
        sources.append(("benchmark", days, months))
    if args.demo or args.both:
        days = demo_days(args.demo_days)
        if args.lumps_as_usage:
            days = days.drop(columns="record_type")
        sources.append(("demo", days, demo_months(days)))
    origins = ORIGINS
    results = []
    for source, days, months in sources:
        if args.smoke:
            months, origins = months[:1], (15,)
            days = days[days["series"] == sorted(days["series"].unique())[0]]
        t0 = time.perf_counter()
        res = backtest(days, months=months, origins=origins,
                       repetitions=args.repetitions)  # fmt: skip
        elapsed = time.perf_counter() - t0
        print(f"{source}: {days['series'].nunique()} series, {len(months)} months, "
              f"{len(res)} forecasts, {args.repetitions} paths each; {elapsed:.0f} s")  # fmt: skip
        results.append(scored(res).assign(source=source))
    print()
    for res in results:
        report(res, res["source"].iat[0], per_series=res["source"].iat[0] == "demo")
    if len(results) > 1:
        report(pd.concat(results, ignore_index=True), "combined", per_series=False)
    if args.out:
        pd.concat(results, ignore_index=True).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
