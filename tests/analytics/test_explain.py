from __future__ import annotations

import numpy as np
import pandas as pd

from analytics.baselines import baselines_compute
from analytics.explain import explain

BASE = {
    "cost_b": 288.0,
    "gpu_hours_b": 144.0,
    "tokens_b": 2e8,
    "requests_b": 1e6,
    "sigma_price": 0.02,
    "sigma_fleet": 0.03,
    "flag": True,
}


def _one(**now: object) -> pd.Series:
    return explain(pd.DataFrame([{**BASE, **now}])).iloc[0]


def test_more_replicas_at_unchanged_traffic_is_a_cost_anomaly_and_says_so() -> None:
    out = _one(
        cost=432.0, gpu_hours=216.0, tokens=2e8, requests=1e6, replicas=9, replicas_b=6
    )
    assert out["cause"] == "cost"
    assert out["sentence"] == (
        "$/1k requests 0.288 → 0.432 (+50%): replicas 6 → 9, "
        "GPU-hours 144 → 216 (+50%) at unchanged traffic"
    )


def test_a_holiday_dip_is_traffic_with_the_fleet_unchanged() -> None:
    out = _one(
        cost=288.0, gpu_hours=144.0, tokens=1.44e8, requests=0.72e6, holiday=True
    )
    assert out["cause"] == "traffic"
    assert out["sentence"] == (
        "$/1k requests 0.288 → 0.400 (+39%): requests \N{MINUS SIGN}28% "
        "(tokens \N{MINUS SIGN}28%), fleet unchanged: holiday dip"
    )


def test_cost_up_50_percent_hidden_in_traffic_up_10_percent_is_cost() -> None:
    out = _one(cost=432.0, gpu_hours=216.0, tokens=2.2e8, requests=1.1e6)
    assert out["cause"] == "cost"
    assert "at tokens +10%" in out["sentence"]


def test_traffic_down_with_the_fleet_growing_out_of_its_band_is_cost() -> None:
    # Traffic part is the largest, but GPU-hours rose 15% (sigma 3%): cost.
    out = _one(cost=331.2, gpu_hours=165.6, tokens=1.5e8, requests=0.75e6)
    assert out["traffic"] > out["fleet"] > 0
    assert out["cause"] == "cost"


def test_longer_requests_at_the_same_tokens_are_size() -> None:
    out = _one(cost=288.0, gpu_hours=144.0, tokens=2e8, requests=0.5e6)
    assert out["cause"] == "size"
    assert "tokens per request 200 → 400 (+100%)" in out["sentence"]


def test_a_launch_that_makes_units_cheaper_is_traffic() -> None:
    # Traffic doubled, fleet +50%: u fell 25%; the fleet moved with the traffic.
    out = _one(cost=432.0, gpu_hours=216.0, tokens=4e8, requests=2e6)
    assert out["delta"] < 0
    assert out["cause"] == "traffic"


def test_without_gpu_hours_the_cause_is_cost_or_traffic_only() -> None:
    frame = pd.DataFrame(
        [
            {
                "cost": 150.0,
                "requests": 1e5,
                "cost_b": 100.0,
                "requests_b": 1e5,
                "flag": True,
            }
        ]
    )
    out = explain(frame).iloc[0]
    assert out["cause"] == "cost"
    assert out["sentence"].endswith("cost 100 → 150 (+50%) at unchanged traffic")


def test_unflagged_rows_have_no_cause_and_no_sentence() -> None:
    out = _one(cost=290.0, gpu_hours=145.0, tokens=2e8, requests=1e6, flag=False)
    assert out["cause"] == "" and out["sentence"] == ""


def test_explanations_of_baseline_flags_sum_exactly() -> None:
    days = pd.date_range("2026-01-05", periods=35)
    gpu = np.full(35, 144.0)
    gpu[30:] = 216.0
    frame = pd.DataFrame(
        {
            "series": "chat",
            "period_start": days,
            "cost": gpu * 2.0,
            "gpu_hours": gpu,
            "tokens": 2e8,
            "requests": 1e6,
        }
    )
    base = baselines_compute(frame)
    rows = pd.concat([frame, base.drop(columns=["u"])], axis=1)
    out = explain(rows)
    assert out.loc[30, "cause"] == "cost"
    parts = out.loc[30, ["price", "fleet", "traffic", "size"]].sum()
    assert abs(parts - out.loc[30, "delta"]) < 1e-12
    assert (out.loc[:29, "cause"] == "").all()


def test_a_pool_whose_fixed_bill_spreads_over_a_holiday_dip_is_traffic() -> None:
    # The bill is unchanged (288), measured GPU-hours fell 40% and traffic 50%:
    # price +67% is out of its band, but the cost did not move: a holiday dip.
    row = dict(cost=288.0, gpu_hours=86.4, tokens=1e8, requests=0.5e6)
    assert _one(**row)["cause"] == "cost"  # without the calendar: price moved
    out = _one(**row, holiday=True)
    assert out["cause"] == "traffic"
    assert out["sentence"] == (
        "$/1k requests 0.288 → 0.576 (+100%): requests \N{MINUS SIGN}50% "
        "(tokens \N{MINUS SIGN}50%), GPU-hours \N{MINUS SIGN}40%: holiday dip"
    )


def test_a_cost_rise_on_a_holiday_is_still_a_cost_anomaly() -> None:
    # Traffic fell 25% but the fleet grew 15%: the cost rose, the holiday does
    # not explain that.
    out = _one(cost=331.2, gpu_hours=165.6, tokens=1.5e8, requests=0.75e6, holiday=True)
    assert out["cause"] == "cost"


def test_replicas_of_an_autoscaled_day_are_named_with_one_decimal() -> None:
    out = _one(
        cost=432.0, gpu_hours=216.0, tokens=2e8, requests=1e6, replicas=8.54,
        replicas_b=6.33,
    )  # fmt: skip
    assert "replicas 6.3 → 8.5, GPU-hours 144 → 216 (+50%)" in out["sentence"]
