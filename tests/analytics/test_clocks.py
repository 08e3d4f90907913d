from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analytics.baselines import BaselineConfig, baselines_compute
from analytics.clocks import clock_costs, effective_rates

DAYS = pd.date_range("2026-10-05", periods=42)


def _days(
    bill_rate: float = 2.0, card: float = 2.36, unbilled: int = 1
) -> pd.DataFrame:
    gpu = np.full(len(DAYS), 144.0)
    frame = pd.DataFrame(
        {
            "series": "chat",
            "day": DAYS,
            "gpu_hours": gpu,
            "rate_card": card,
            "bill_cost": gpu * bill_rate,
            "bill_status": "final",
        }
    )
    frame.loc[len(DAYS) - unbilled :, ["bill_cost", "bill_status"]] = [np.nan, ""]
    return frame


def test_the_effective_rate_is_bill_over_measured_gpu_hours_of_recent_final_days() -> (
    None
):
    days = pd.DataFrame(
        {
            "series": "a",
            "day": pd.date_range("2026-11-01", periods=3),
            "bill_cost": [100.0, 300.0, np.nan],
            "gpu_hours": [50.0, 100.0, 100.0],
            "bill_status": ["final", "final", ""],
        }
    )
    rates = effective_rates(days, lookback_days=7)
    assert rates["effective_rate"].tolist() == [2.0, 400.0 / 150.0]
    assert rates["as_of"].tolist() == [
        pd.Timestamp("2026-11-02"),
        pd.Timestamp("2026-11-03"),
    ]
    out = clock_costs(days.assign(rate_card=2.5), rates, time="day")
    assert out["clock"].tolist() == ["final", "final", "provisional"]
    assert out["rate_source"].tolist() == ["bill", "bill", "effective"]
    assert out.loc[2, "cost"] == pytest.approx(100.0 * 400.0 / 150.0)
    assert out.loc[2, "list_cost"] == 250.0
    assert out.loc[0, "rate"] == 2.0


def test_without_any_final_day_the_rate_card_prices_and_says_so() -> None:
    days = pd.DataFrame(
        {
            "series": "a",
            "day": pd.date_range("2026-11-01", periods=2),
            "gpu_hours": [10.0, np.nan],
            "rate_card": 3.0,
            "bill_cost": [5.0, np.nan],
            "bill_status": ["estimated", ""],
        }
    )
    out = clock_costs(days, effective_rates(days), time="day")
    assert out["clock"].tolist() == ["estimated", "provisional"]
    assert out["rate_source"].tolist() == ["bill", "rate_card"]
    assert out.loc[0, "cost"] == 5.0
    assert np.isnan(out.loc[1, "cost"])  # missing GPU-hours: missing cost, not 0


def test_hours_of_a_day_are_priced_with_the_rate_learnt_before_that_day() -> None:
    days = pd.DataFrame(
        {
            "series": "a",
            "day": pd.to_datetime(["2026-11-01", "2026-11-02"]),
            "gpu_hours": [10.0, 10.0],
            "bill_cost": [20.0, 40.0],
            "bill_status": "final",
        }
    )
    hours = pd.DataFrame(
        {
            "series": "a",
            "period_start": pd.to_datetime(
                ["2026-11-01 05:00", "2026-11-02 05:00", "2026-11-03 05:00"]
            ),
            "gpu_hours": 1.0,
            "rate_card": 9.0,
        }
    )
    out = clock_costs(hours, effective_rates(days))
    assert out["rate"].tolist() == [9.0, 2.0, 3.0]
    assert out["rate_source"].tolist() == ["rate_card", "effective", "effective"]


# A narrow band (3 x 3%) so that an 18% price jump is well outside it.
NARROW = BaselineConfig(band_floor=0.03)


def _through_baselines(priced: pd.Series) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "series": "chat",
            "period_start": DAYS,
            "cost": priced.to_numpy(),
            "requests": 1e6,
            "gpu_hours": 144.0,
        }
    )
    return baselines_compute(frame, config=NARROW)


def test_the_last_unbilled_day_priced_at_the_effective_rate_raises_no_flag() -> None:
    days = _days()
    priced = clock_costs(days, effective_rates(days), time="day")
    assert priced["rate_source"].iat[-1] == "effective"
    out = _through_baselines(priced["cost"])
    assert not out["flag"].any()
    assert out["u"].iat[-1] == pytest.approx(out["baseline"].iat[-1], rel=1e-12)
    # The rate card alone (18% above the bill) is what used to flag it.
    naive = priced["cost"].copy()
    naive.iat[-1] = 144.0 * 2.36
    assert _through_baselines(naive)["flag"].iat[-1]


def test_a_day_switching_from_provisional_to_billed_raises_no_flag() -> None:
    before = _days(unbilled=3)
    after = _days(unbilled=2)  # the bill for day -3 arrived
    for days in (before, after):
        priced = clock_costs(days, effective_rates(days), time="day")
        assert not _through_baselines(priced["cost"])["flag"].any()
    priced = clock_costs(after, effective_rates(after), time="day")
    assert priced["clock"].iat[-3] == "final"
