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

With ``--demo``, the app's own forecast instead, end to end: the demo fleet
(``costapp.sources.demo``, ``--demo-days`` days ending 2026-12-02, default
400) is ingested into the database of ``DATABASE_URL`` through the app's
ingest path, its unit-cost figures recomputed, and
``costapp.economics.forecasts.selectors.month_forecast_read`` (what the
budgets page shows: record types from the bill lines, so credits, refunds,
taxes and fees are forecast as lumps and the rest by ETS; the calibrated
interval) is asked for the fleet, every team and every deployment as of each
origin of every whole billed month with 8 weeks of figures before it.
``--wipe`` lets it replace a database's bills and figures; ``--no-load``
reuses a loaded one.

Not run by CI (``--smoke`` is).

    .venv/bin/python bench/bench_forecast.py [--series 40] [--seeds 300-301]
    DATABASE_URL=... .venv/bin/python bench/bench_forecast.py --demo [--wipe]
    .venv/bin/python bench/bench_forecast.py --both [--out forecasts.csv]
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


def _django_setup() -> None:
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")
    import django

    django.setup()


def demo_app_load(days: int, *, wipe: bool) -> None:
    """Load the demo fleet (``days`` of telemetry and bills ending DEMO_END)
    into the database of DATABASE_URL through the app's ingest path and
    recompute its unit-cost figures. Refuses a database holding figures or
    bills unless ``wipe`` (which deletes the demo's tables first)."""
    _django_setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from costapp.economics.unit_costs.services import unit_costs_recompute
    from costapp.models import CostLine, UnitCostFigure
    from tests.support.demo_data import demo_load, demo_tables_wipe

    if CostLine.objects.exists() or UnitCostFigure.objects.exists():
        if not wipe:
            raise SystemExit(
                "the database of DATABASE_URL holds bills or figures: pass "
                "--wipe to replace them with the demo's"
            )
        demo_tables_wipe()
    end = pd.Timestamp(DEMO_END, tz="UTC").to_pydatetime()
    demo_load(end=end, days=days)
    unit_costs_recompute(now=end)


def _drop_record_types() -> None:
    """The app's spend frame without its record_type column: every line is
    daily spend, the single model the app ran before."""
    from costapp.economics.forecasts import compute

    split = compute.spend_frame_read

    def whole(*args: object) -> pd.DataFrame:
        frame = split(*args)  # type: ignore[arg-type]
        return frame.groupby("day", as_index=False)["cost"].sum()

    compute.spend_frame_read = whole  # type: ignore[assignment]


def demo_app_backtest(*, origins: tuple[int, ...], smoke: bool = False) -> pd.DataFrame:
    """The app's own forecast (``economics.forecasts.selectors.month_forecast_read``,
    record types from the bill lines, the calibrated 80% interval) for the
    fleet, every team and every deployment, as of each origin of every whole
    billed month with 8 weeks of figures before it; the actual is the
    month's spend as the app sums it (its figures' cost)."""
    from costapp.economics.figures import figures_read, scope_names_read
    from costapp.economics.forecasts.selectors import month_forecast_read

    names = scope_names_read()
    series = [(scope, name) for scope in ("fleet", "team", "deployment")
              for name in names[scope]]  # fmt: skip
    if smoke:
        series = series[:1]
    rows = []
    for scope, name in series:
        figures = [
            f for f in figures_read(scope=scope, names=[name])
            if f.currency == "USD" and f.cost is not None
        ]  # fmt: skip
        if not figures:
            continue
        frame = pd.DataFrame(
            {
                "day": [pd.Timestamp(f.period_start).tz_convert(None) for f in figures],
                "cost": [float(f.cost) for f in figures],  # type: ignore[arg-type]
                "billed": [f.clock != "provisional" for f in figures],
            }
        )
        first = frame["day"].min()
        last_billed = frame.loc[frame["billed"], "day"].max()
        months = [
            m for m in pd.date_range(first, last_billed, freq="MS")
            if m - pd.Timedelta(weeks=8) >= first
            and m + pd.offsets.MonthEnd(0) <= last_billed
        ]  # fmt: skip
        if smoke:
            months = months[:1]
        for month in months:
            end = month + pd.offsets.MonthEnd(0)
            in_month = frame[(frame["day"] >= month) & (frame["day"] <= end)]
            actual = float(in_month["cost"].sum())
            for dom in origins:
                today = (month + pd.Timedelta(days=dom)).date()
                f = month_forecast_read(
                    scope=scope, name=name, currency="USD", today=today
                )
                if f is None:
                    continue
                rows.append(
                    {
                        "series": f"{scope}/{name}", "month": month,
                        "day_of_month": dom, "actual": actual, "point": f.point,
                        "lower": f.lower, "upper": f.upper, "method": f.method,
                        "remaining": f.remaining_days, "widened": True,
                        "lumps_expected": f.lumps_expected,
                    }
                )  # fmt: skip
    return pd.DataFrame(rows)


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


def scored(res: pd.DataFrame) -> pd.DataFrame:
    """APE and coverage (ETS's own interval and the calibrated one). An
    interval of zero width (a constant series, lumps known) covers an actual
    equal to it up to float summation (1e-9 relative)."""
    res = res.copy()
    res["ape"] = (res["point"] - res["actual"]).abs() / res["actual"].abs()
    tol = 1e-9 * res["actual"].abs().clip(lower=1.0)
    inside = (res["actual"] >= res["lower"] - tol) & (
        res["actual"] <= res["upper"] + tol
    )
    # The app's forecasts come widened already: ETS's own is not known.
    widened = (
        res["widened"].fillna(False).astype(bool)
        if "widened" in res
        else pd.Series(False, index=res.index)
    )
    res["covered_ets"] = inside.astype(float).where(~widened)
    scale = (WIDEN[0] + WIDEN[1] * res["remaining"]).clip(lower=1.0)
    lower = res["point"] + scale * (res["lower"] - res["point"])
    upper = res["point"] + scale * (res["upper"] - res["point"])
    res["covered"] = inside.where(
        widened, (res["actual"] >= lower - tol) & (res["actual"] <= upper + tol)
    )
    return res


def _share(values: pd.Series) -> str:
    """A share of the known values; n/a where none is known (the app's
    forecasts carry only their calibrated interval)."""
    known = values.dropna()
    return f"{known.astype(float).mean():.1%}" if len(known) else "n/a"


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
            f"{g['covered'].mean():.1%} | {_share(g['covered_ets'])} |"
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
        "--wipe", action="store_true",
        help="replace the bills and figures of DATABASE_URL's database with the demo's",
    )  # fmt: skip
    parser.add_argument(
        "--no-load", action="store_true",
        help="the demo is loaded and recomputed already: only forecast",
    )  # fmt: skip
    parser.add_argument(
        "--lumps-as-usage", action="store_true",
        help="the demo without record types (one model for every line, as the "
        "app was before), for comparison",
    )  # fmt: skip
    parser.add_argument("--out", help="write every forecast to this CSV")
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    origins = ORIGINS
    if args.smoke:
        seeds, args.series, args.repetitions = seeds[:1], 1, 100
        args.demo_days, origins = 100, (15,)
    results = []
    if not args.demo or args.both:
        frames = [generate(s, n_series=args.series, n_days=365) for s in seeds]
        days = pd.concat(frames, ignore_index=True)[["series", "day", "cost"]]
        # The generator starts 2025-01-06: months from March have >= 8 weeks.
        months = [pd.Timestamp(f"2025-{m:02d}-01") for m in range(3, 13)]
        if args.smoke:
            months = months[:1]
            days = days[days["series"] == sorted(days["series"].unique())[0]]
        t0 = time.perf_counter()
        res = backtest(days, months=months, origins=origins,
                       repetitions=args.repetitions)  # fmt: skip
        print(f"benchmark: {days['series'].nunique()} series, {len(months)} months, "
              f"{len(res)} forecasts, {args.repetitions} paths each; "
              f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
        results.append(scored(res).assign(source="benchmark"))
    if args.demo or args.both:
        t0 = time.perf_counter()
        _django_setup()
        if not args.no_load:
            demo_app_load(args.demo_days, wipe=args.wipe)
        loaded = time.perf_counter() - t0
        t0 = time.perf_counter()
        if args.lumps_as_usage:
            _drop_record_types()
        res = demo_app_backtest(origins=origins, smoke=args.smoke)
        print(f"demo (the app's month_forecast_read): {res['series'].nunique()} "
              f"series, {res.groupby(['series', 'month']).ngroups} (series, month) "
              f"pairs, {len(res)} forecasts; load and recompute {loaded:.0f} s, "
              f"forecasts {time.perf_counter() - t0:.0f} s")  # fmt: skip
        results.append(scored(res).assign(source="demo"))
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
