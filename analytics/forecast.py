"""Month-end spend forecast with a prediction interval, and budget burn.

Month-end spend = spend to date (bill where final, provisional where not: the
caller passes the ``cost`` of ``analytics.clocks``) + the forecast of the
remaining days. The forecast is an ETS model (statsmodels ``ETSModel``:
additive error, no trend, additive weekly seasonality when the history
allows) fitted on the series' recent daily cost; its interval comes
from ``repetitions`` simulated paths of the remaining days
(``simulate(..., anchor="end")``), each path summed, so the interval is the
interval of the *sum* (not a sum of daily intervals, which would be too
wide, nor Holt-Winters' point forecast, which has none), widened by an
empirical factor that grows with the days left (``WIDEN``, below).

Lines posted in lumps (a ``record_type`` column: credits, refunds, taxes,
fees) are not daily spend: a -$500 credit on the 1st fitted by ETS is a
crash of the level every month. With that column the model is split by
record type: ETS forecasts the daily (usage) spend, and the lumps still to
come this month are those of the same days of the month in the previous
``LUMP_MONTHS`` months (their mean is the point; the interval draws from
them), added to each simulated path. Lumps already posted this month are in
spend to date.

Seeded and deterministic: the same history and seed give the same figures.
Too short a history (under ``MIN_HISTORY`` days) falls back to the mean of
the known days with a normal interval, and says so in ``method``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

MIN_HISTORY = 14
SEASONAL_HISTORY = 28
# ETS's own paths are too narrow for month totals: fleets move in steps
# (launches, incidents, price changes) that its Gaussian errors do not carry,
# and the shortfall grows with the days left. The spread of the simulated
# totals around their mean is multiplied by max(1, a + b x remaining days),
# calibrated on the backtest's seeds 200-201 (ETS alone covered 68% with its
# 80% interval) and reported on seeds 300-301 (docs/benchmarks.md).
WIDEN = (0.57, 0.088)
# Record types posted in lumps rather than day by day: costapp's own names
# (costapp.sources.cost_explorer.RECORD_TYPES) and Cost Explorer's.
LUMP_TYPES = frozenset(
    {"credit", "refund", "tax", "fee", "rifee", "savingsplanrecurringfee",
     "savingsplanupfrontfee"}
)  # fmt: skip
LUMP_MONTHS = 3


@dataclass(frozen=True)
class MonthForecast:
    series: str
    month: pd.Timestamp  # first day of the month
    as_of: pd.Timestamp  # last day included in spend to date
    to_date: float
    remaining_days: int
    point: float  # mean of the simulated month-end totals
    lower: float
    upper: float
    interval: float  # e.g. 0.8 for an 80% interval
    method: str  # "ets", "ets-nonseasonal" or "mean"
    budget: float | None
    burn_rate: float  # spend per day so far this month
    budget_burn_date: pd.Timestamp | None  # first day the budget runs out at this pace
    budget_share: float | None  # point / budget
    # Lump lines (credits, refunds, taxes, fees) expected in the remaining
    # days (0 without a record_type column), included in point and interval.
    lumps_expected: float = 0.0
    # Cumulative spend by day through the month: actual to ``as_of``, then the
    # simulated mean. The budget's burn date is read off it (``budget_burn``),
    # so a stored forecast answers any budget without re-simulating.
    path: tuple[tuple[pd.Timestamp, float], ...] = ()


def budget_burn(
    path: Sequence[tuple[pd.Timestamp, float]], budget: float
) -> pd.Timestamp | None:
    """The first day cumulative spend on ``path`` reaches ``budget``."""
    if budget <= 0:
        raise InvalidInput("budget", budget, "must be positive")
    return next((day for day, spent in path if spent >= budget), None)


def with_budget(forecast: MonthForecast, budget: float | None) -> MonthForecast:
    """The forecast against ``budget``: share of the point and the day the
    cumulative path reaches it (none: the budget fields cleared). A stored
    forecast is budget-free, so an edited budget needs no new simulation."""
    if budget is None:
        return replace(forecast, budget=None, budget_share=None, budget_burn_date=None)
    # First: it refuses a budget of 0 or less before the share divides by it.
    burn = budget_burn(forecast.path, budget)
    return replace(
        forecast,
        budget=budget,
        budget_share=forecast.point / budget,
        budget_burn_date=burn,
    )


def _paths(
    history: np.ndarray, horizon: int, repetitions: int, seed: int
) -> tuple[np.ndarray, str]:
    """``repetitions`` x ``horizon`` simulated daily costs after ``history``."""
    if horizon == 0:
        return np.zeros((repetitions, 0)), "none"
    n = len(history)
    if n < MIN_HISTORY or np.nanstd(history) == 0:
        rng = np.random.default_rng(seed)
        mean = float(np.nanmean(history)) if n else float("nan")
        sd = float(np.nanstd(history)) if n > 1 else 0.0
        return rng.normal(mean, sd, size=(repetitions, horizon)), "mean"
    # Lazy: statsmodels costs about a second to import, and only this path
    # (a month with days left and enough history) needs it.
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    seasonal = n >= SEASONAL_HISTORY
    model = ETSModel(
        pd.Series(history, dtype=float),
        error="add",
        # No trend: over a month's horizon the slow drift of a fleet is inside
        # the level's own adaptation, and a damped trend costs 3x the fit
        # time for a worse AIC on the benchmark series (docs/unit-costs.md).
        trend=None,
        seasonal="add" if seasonal else None,
        seasonal_periods=7 if seasonal else None,
    )
    with warnings.catch_warnings():
        # Convergence chatter is not information for the user; the interval is.
        warnings.simplefilter("ignore")
        fit = model.fit(disp=False)
        sims = fit.simulate(
            horizon, anchor="end", repetitions=repetitions, random_state=seed
        )
    arr = np.asarray(sims, dtype=float).reshape(horizon, repetitions).T
    return arr, "ets" if seasonal else "ets-nonseasonal"


def _lumps(
    lumps: pd.Series, *, month: pd.Timestamp, as_of: pd.Timestamp,
    first: pd.Timestamp, months: int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per previous month (up to ``months``, only those the history covers
    whole): the lumps posted after ``as_of``'s day of the month; and their
    mean per remaining day of this month (for the burn date)."""
    month_end = month + pd.offsets.MonthEnd(0)
    horizon = int((month_end - as_of).days)
    dom = as_of.day
    rests, per_day = [], []
    for k in range(1, months + 1):
        m = month - pd.DateOffset(months=k)
        if m < first:
            break
        end = m + pd.offsets.MonthEnd(0)
        got = lumps[
            (lumps.index > m + pd.Timedelta(days=dom - 1)) & (lumps.index <= end)
        ]
        rests.append(float(got.sum()))
        daily = np.zeros(horizon)
        offsets = (got.index - m).days - dom  # 0 = the first remaining day
        keep = (offsets >= 0) & (offsets < horizon)
        np.add.at(daily, np.asarray(offsets[keep]), got.to_numpy(float)[keep])
        per_day.append(daily)
    if not rests:
        return np.zeros(1), np.zeros(horizon)
    return np.array(rests), np.mean(per_day, axis=0)


def forecast_month(
    days: pd.DataFrame,
    *,
    as_of: pd.Timestamp | str,
    series: str = "",
    budget: float | None = None,
    history_days: int = 56,
    repetitions: int = 1000,
    interval: float = 0.8,
    seed: int = 0,
    widen: tuple[float, float] | None = WIDEN,
    lump_months: int = LUMP_MONTHS,
) -> MonthForecast:
    """Forecast one series' spend for the month containing ``as_of``.

    ``days``: columns ``day`` (UTC midnight) and ``cost`` for this series,
    optionally ``record_type`` (then several rows a day; ``LUMP_TYPES`` are
    forecast as lumps, the rest as daily spend); rows after ``as_of`` are
    ignored. A missing day of daily spend before ``as_of`` is filled by linear
    interpolation for the fit and counted in spend to date.
    ``widen`` is the interval calibration (``WIDEN``); None gives ETS's own.
    """
    if not 0 < interval < 1:
        raise InvalidInput("interval", interval, "must be in (0, 1)")
    if repetitions < 10:
        raise InvalidInput("repetitions", repetitions, "need at least 10 paths")
    as_of = pd.Timestamp(as_of).normalize()
    month = as_of.replace(day=1)
    month_end = month + pd.offsets.MonthEnd(0)
    frame = days[["day", "cost"]].copy()
    frame["day"] = pd.DatetimeIndex(pd.to_datetime(frame["day"])).normalize()
    frame = frame[frame["day"] <= as_of]
    if "record_type" in days.columns:
        kinds = days.loc[frame.index, "record_type"].astype("string").str.lower()
        lump = kinds.isin(LUMP_TYPES).fillna(False).to_numpy(bool)
    else:
        lump = np.zeros(len(frame), dtype=bool)
    first = frame["day"].min() if len(frame) else as_of
    lumps = frame[lump].groupby("day")["cost"].sum()
    frame = frame[~lump].groupby("day")["cost"].sum(min_count=1)
    horizon = int((month_end - as_of).days)
    if len(frame) == 0 and len(lumps):  # lumps only: no daily spend to fit
        frame = pd.Series(0.0, index=pd.DatetimeIndex([first]))
    start = (
        max(as_of - pd.Timedelta(days=history_days - 1), frame.index.min())
        if len(frame)
        else as_of
    )
    full = frame.reindex(pd.date_range(start, as_of)).astype(float)
    filled = full.interpolate(limit_direction="both").to_numpy(float)
    in_month = full.index >= month
    lumps_in_month = lumps[lumps.index >= month]
    to_date = float(np.nansum(filled[in_month])) if len(filled) else 0.0
    to_date += float(lumps_in_month.sum())
    elapsed = int(in_month.sum())
    history = filled[~np.isnan(filled)]
    if len(lumps) and not len(history):
        history = np.zeros(1)

    paths, method = _paths(history, horizon, repetitions, seed)
    rests, lump_days = _lumps(
        lumps, month=month, as_of=as_of, first=first, months=lump_months
    )
    if not len(lumps) or horizon == 0:
        rests, lump_days = np.zeros(1), np.zeros(horizon)
    # Each path draws the rest of the month's lumps from a previous month's,
    # in equal shares: the point carries their mean.
    draws = np.random.default_rng(seed).permutation(np.resize(rests, repetitions))
    totals = to_date + paths.sum(axis=1) + draws
    point = float(totals.mean())
    if widen is not None:
        scale = max(1.0, widen[0] + widen[1] * horizon)
        totals = point + scale * (totals - point)
    alpha = (1 - interval) / 2
    lower, upper = np.quantile(totals, [alpha, 1 - alpha])
    burn_rate = to_date / elapsed if elapsed else float("nan")

    spent = pd.Series(np.nan_to_num(filled[in_month]), index=full.index[in_month])
    spent = spent.add(lumps_in_month, fill_value=0.0)
    past = np.cumsum(spent.to_numpy(float))
    future = to_date + np.cumsum(paths.mean(axis=0) + lump_days)
    path = tuple(
        (pd.Timestamp(day), float(v)) for day, v in zip(spent.index, past, strict=True)
    ) + tuple(
        (as_of + pd.Timedelta(days=i + 1), float(v)) for i, v in enumerate(future)
    )
    forecast = MonthForecast(
        series=series, month=month, as_of=as_of, to_date=to_date, remaining_days=horizon,
        point=point, lower=float(lower), upper=float(upper), interval=interval,
        method=method, budget=None, burn_rate=burn_rate, budget_burn_date=None,
        budget_share=None, lumps_expected=float(np.mean(draws)), path=path,
    )  # fmt: skip
    return forecast if budget is None else with_budget(forecast, budget)


def forecast_months(
    days: pd.DataFrame,
    *,
    as_of: pd.Timestamp | str,
    keys: Sequence[str] = ("series",),
    budgets: Mapping[str, float] | None = None,
    repetitions: int = 1000,
    interval: float = 0.8,
    seed: int = 0,
) -> pd.DataFrame:
    """``forecast_month`` for every series (one fitted model each: ETS is per
    series by nature); one row per series with the ``MonthForecast`` fields.
    A series key of several columns is joined with "/" in ``series``."""
    rows = []
    for key, group in days.groupby(list(keys), sort=True):
        name = "/".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        budget = (budgets or {}).get(name)
        rows.append(
            asdict(
                forecast_month(
                    group,
                    as_of=as_of,
                    series=name,
                    budget=budget,
                    repetitions=repetitions,
                    interval=interval,
                    seed=seed,
                )
            )
        )
    return pd.DataFrame(rows)
