from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analytics.errors import InvalidInput
from analytics.forecast import forecast_month, forecast_months


def _history(
    n: int = 75, level: float = 100.0, noise: float = 0.05, seed: int = 1
) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    days = pd.date_range("2026-09-01", periods=n)
    weekly = np.where(days.weekday >= 5, 0.7, 1.0)
    return pd.DataFrame({"day": days, "cost": level * weekly * rng.normal(1, noise, n)})


def test_month_end_is_spend_to_date_plus_the_simulated_rest() -> None:
    days = _history()
    as_of = pd.Timestamp("2026-11-14")
    out = forecast_month(days, as_of=as_of, repetitions=500)
    known = days[(days["day"] >= "2026-11-01") & (days["day"] <= as_of)]["cost"].sum()
    assert out.to_date == pytest.approx(known)
    assert out.remaining_days == 16
    assert out.method == "ets"
    # About 16 more days of ~91/day (weekday 100, weekend 70).
    assert out.point == pytest.approx(known + 16 * (5 * 100 + 2 * 70) / 7, rel=0.05)
    assert out.lower < out.point < out.upper
    assert out.lower > known


def test_the_forecast_is_deterministic_for_a_seed() -> None:
    days = _history()
    a = forecast_month(days, as_of="2026-11-10", repetitions=200, seed=7)
    b = forecast_month(days, as_of="2026-11-10", repetitions=200, seed=7)
    assert a == b


def test_the_last_day_of_the_month_has_no_uncertainty_left() -> None:
    days = _history()
    out = forecast_month(days, as_of="2026-10-31", repetitions=100)
    assert out.remaining_days == 0
    for value in (out.point, out.lower, out.upper):
        assert value == pytest.approx(out.to_date, rel=1e-12)


def test_the_budget_burn_date_at_the_current_pace() -> None:
    # Constant $100/day: a $1,000 budget runs out on the 10th.
    days = pd.DataFrame({"day": pd.date_range("2026-10-01", periods=35), "cost": 100.0})
    out = forecast_month(days, as_of="2026-11-04", budget=1000.0, repetitions=100)
    assert out.method == "mean"  # no variance: no model to fit
    assert out.burn_rate == pytest.approx(100.0)
    assert out.budget_burn_date == pd.Timestamp("2026-11-10")
    assert out.budget_share == pytest.approx(3.0)
    spent = forecast_month(days, as_of="2026-11-04", budget=250.0, repetitions=100)
    assert spent.budget_burn_date == pd.Timestamp("2026-11-03")  # already past


def test_a_short_history_falls_back_to_the_mean_and_says_so() -> None:
    days = _history(n=5).assign(day=pd.date_range("2026-11-01", periods=5))
    out = forecast_month(days, as_of="2026-11-05", repetitions=100)
    assert out.method == "mean"
    assert out.lower < out.point < out.upper


def test_every_series_gets_a_row_and_bad_inputs_are_named() -> None:
    a = _history().assign(series="a")
    b = _history(level=50, seed=2).assign(series="b")
    out = forecast_months(
        pd.concat([a, b]), as_of="2026-11-10", budgets={"b": 900.0}, repetitions=100
    )
    assert out["series"].tolist() == ["a", "b"]
    assert out["budget"].isna().tolist() == [True, False]
    with pytest.raises(InvalidInput, match="interval"):
        forecast_month(a, as_of="2026-11-10", interval=1.5)


def test_the_calibrated_interval_is_the_model_interval_widened_by_the_days_left() -> (
    None
):
    from analytics.forecast import WIDEN

    days = _history()
    raw = forecast_month(days, as_of="2026-11-05", repetitions=300, widen=None)
    cal = forecast_month(days, as_of="2026-11-05", repetitions=300)
    scale = max(1.0, WIDEN[0] + WIDEN[1] * 25)
    assert cal.point == raw.point
    assert cal.upper - cal.point == pytest.approx(scale * (raw.upper - raw.point))
    assert cal.point - cal.lower == pytest.approx(scale * (raw.point - raw.lower))


# --- lumps: credits, refunds, taxes and fees by record type ---------------


def _billed(
    start: str = "2026-07-01", end: str = "2026-11-30", usage: float = 100.0
) -> pd.DataFrame:
    """$100/day of usage, a -$500 credit on each 1st and a $300 tax on each
    month's last day, as Cost Explorer lines (one row per day and type)."""
    days = pd.date_range(start, end)
    rows = [(d, "usage", usage) for d in days]
    rows += [(d, "credit", -500.0) for d in days if d.day == 1]
    rows += [(d, "Tax", 300.0) for d in days if d.is_month_end]
    return pd.DataFrame(rows, columns=["day", "record_type", "cost"])


def test_lumps_are_forecast_by_day_of_month_and_daily_spend_by_the_model() -> None:
    lines = _billed()
    out = forecast_month(lines, as_of="2026-11-14", repetitions=200)
    # To date: 14 days of usage and the credit of the 1st; to come: 16 days
    # of usage and the tax of the 30th (every previous month had one).
    assert out.to_date == pytest.approx(14 * 100 - 500)
    assert out.lumps_expected == pytest.approx(300.0)
    assert out.point == pytest.approx(14 * 100 - 500 + 16 * 100 + 300)
    assert out.lower == pytest.approx(out.point) and out.upper == pytest.approx(
        out.point
    )
    # The last day: the tax is in spend to date, nothing is left to come.
    last = forecast_month(lines, as_of="2026-11-30", repetitions=50)
    assert last.lumps_expected == 0.0
    assert last.point == pytest.approx(30 * 100 - 500 + 300)


def test_without_record_types_the_lumps_are_fitted_as_daily_spend() -> None:
    lines = _billed().drop(columns="record_type")
    out = forecast_month(lines, as_of="2026-11-14", repetitions=200)
    assert out.lumps_expected == 0.0
    assert out.method.startswith("ets")  # credits and taxes make it vary
    exact = 14 * 100 - 500 + 16 * 100 + 300
    assert out.point != pytest.approx(exact, rel=1e-6)


def test_lumps_vary_the_interval_and_count_only_months_the_history_covers() -> None:
    lines = _billed(start="2026-08-10")  # August is not whole: not a month to learn
    lines.loc[
        (lines["record_type"] == "Tax") & (lines["day"] == "2026-10-31"), "cost"
    ] = 900.0
    out = forecast_month(lines, as_of="2026-11-14", repetitions=1000, widen=None)
    # September's $300 and October's $900: the point takes their mean, the
    # (uncalibrated) interval spans them.
    assert out.lumps_expected == pytest.approx(600.0)
    assert out.point == pytest.approx(14 * 100 - 500 + 16 * 100 + 600)
    assert out.lower == pytest.approx(14 * 100 - 500 + 16 * 100 + 300)
    assert out.upper == pytest.approx(14 * 100 - 500 + 16 * 100 + 900)


def test_a_series_of_credits_only_is_its_credits() -> None:
    lines = _billed()
    credits = lines[lines["record_type"] == "credit"]
    out = forecast_month(credits, as_of="2026-11-14", repetitions=100)
    assert out.to_date == pytest.approx(-500.0)
    assert out.point == pytest.approx(-500.0)
    before = forecast_month(credits, as_of="2026-10-31", repetitions=100)
    assert before.point == pytest.approx(-500.0)  # October's, posted on the 1st


def test_the_burn_date_counts_lumps_already_posted_and_to_come() -> None:
    lines = _billed()
    lines = lines[lines["record_type"] != "credit"]
    # $100/day and $300 on the 30th: a $2,950 budget is spent on the 30th
    # (29 x 100 = 2,900 on the 29th; the 30th's 100 + 300 passes it).
    out = forecast_month(lines, as_of="2026-11-10", budget=2950.0, repetitions=100)
    assert out.budget_burn_date == pd.Timestamp("2026-11-30")
    late = forecast_month(lines, as_of="2026-11-30", budget=3100.0, repetitions=100)
    assert late.budget_burn_date == pd.Timestamp("2026-11-30")  # 3,000 + 300
