from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analytics.errors import InvalidInput
from analytics.idle import (
    UNDERESTIMATES,
    at_rate,
    headroom,
    headroom_days,
    paid_idle,
    pool_idle,
)


def test_pool_idle_is_the_idle_share_of_the_pool_bill() -> None:
    shares = pd.DataFrame(
        {
            "pool": "p",
            "day": "2026-11-01",
            "target": ["a", "b", "__idle__"],
            "amount": [60.0, 24.0, 16.0],
        }
    )
    out = pool_idle(shares).iloc[0]
    assert out["idle_cost"] == 16.0 and out["idle_share"] == pytest.approx(0.16)


def test_paid_minus_measured_gpu_hours_priced_at_the_paid_rate() -> None:
    frame = pd.DataFrame(
        {
            "cost": [192.0, 100.0, 50.0],
            "paid_gpu_hours": [192.0, 10.0, np.nan],
            "gpu_hours": [144.0, 12.0, 5.0],
        }
    )
    out = paid_idle(frame)
    assert out["idle_cost"].iloc[0] == pytest.approx(48.0)
    assert out["idle_gpu_hours"].iloc[1] == 0.0  # measured above paid: no negative idle
    assert np.isnan(out["idle_cost"].iloc[2])


def test_a_mig_instance_measures_its_slices_share_of_the_gpu() -> None:
    # A 3g instance for 24 h is 24 * 3/7 GPU-hours; the GPU paid 24.
    from analytics.unit_costs import measured_gpu_hours

    used = measured_gpu_hours(
        pd.DataFrame(
            {"replica_hours": [24.0], "gpus_per_replica": [1], "mig_slices": [3]}
        )
    )
    assert used.iloc[0] == pytest.approx(24 * 3 / 7)
    out = paid_idle(
        pd.DataFrame({"cost": [48.0], "paid_gpu_hours": [24.0], "gpu_hours": used})
    )
    assert out["idle_cost"].iloc[0] == pytest.approx(48.0 * 4 / 7)


def test_headroom_at_the_target_utilisation_clipped_and_labelled() -> None:
    frame = pd.DataFrame(
        {
            "cost": [100.0, 100.0, 100.0],
            "replicas": [4.0, 4.0, 2.0],
            "load": [14.0, 30.0, 25.0],
            "capacity_per_replica": [10.0, 10.0, 10.0],
            "calibrated": [True, False, False],
        }
    )
    out = headroom(frame)
    # 4 replicas x 10 rps x 0.7 = 28 usable; 14 used -> half is headroom.
    assert out["headroom_share"].iloc[0] == pytest.approx(0.5)
    assert out["headroom_cost"].iloc[0] == pytest.approx(50.0)
    assert out["needed_replicas"].iloc[0] == pytest.approx(2.0)
    assert out["headroom_share"].iloc[1] == 0.0  # above target: clipped at 0
    assert out["estimate"].tolist() == ["calibrated", "roofline", "roofline"]
    assert out["note"].tolist() == ["", "", "model underestimates"]


def test_a_target_utilisation_outside_0_1_is_refused() -> None:
    with pytest.raises(InvalidInput, match="target_utilisation"):
        headroom(
            pd.DataFrame(
                {
                    "cost": [1.0],
                    "replicas": [1.0],
                    "load": [1.0],
                    "capacity_per_replica": [1.0],
                }
            ),
            target_utilisation=1.5,
        )


def test_a_deployment_billed_24_h_that_measured_18_h_has_6_h_of_paid_idle() -> None:
    # One g6.xlarge (1 GPU) billed 24 instance-hours for $19.20; 18 GPU-hours
    # measured: 6 idle GPU-hours at $0.80 per paid GPU-hour.
    out = paid_idle(
        pd.DataFrame({"cost": [19.2], "paid_gpu_hours": [24.0], "gpu_hours": [18.0]})
    )
    assert out["idle_gpu_hours"].iloc[0] == pytest.approx(6.0)
    assert out["idle_cost"].iloc[0] == pytest.approx(4.8)


def _hours(load: list[float], **extra: object) -> pd.DataFrame:
    n = len(load)
    return pd.DataFrame(
        {
            "deployment": "d",
            "day": "2026-11-02",
            "gpu_hours": [2.0] * n,
            "replicas": [2.0] * n,
            "load": load,
            "capacity_per_replica": [5.0] * n,
            "calibrated": [False] * n,
        }
        | extra  # type: ignore[operator]
    )


def test_headroom_days_weighs_each_hour_by_its_gpu_hours() -> None:
    # 2 replicas x 5 rps x 0.7 = 7 rps usable. 12 h at 3.5 rps (half unused),
    # 12 h at 7 rps (none): 12 x 0.5 x 2 GPU-hours = 12 headroom GPU-hours.
    out = headroom_days(_hours([3.5] * 12 + [7.0] * 12)).iloc[0]
    assert out["hours"] == 24 and out["complete"]
    assert out["gpu_hours"] == pytest.approx(48.0)
    assert out["headroom_gpu_hours"] == pytest.approx(12.0)
    assert out["underestimated_hours"] == 0
    assert out["estimate"] == "roofline"


def test_load_between_the_target_and_full_capacity_is_clipped_at_0() -> None:
    # 8 rps is above the 7 usable but below the 10 the replicas carry.
    out = headroom_days(_hours([8.0] * 24)).iloc[0]
    assert out["headroom_gpu_hours"] == 0.0
    assert out["underestimated_hours"] == 0


def test_load_above_the_predicted_capacity_says_the_model_underestimates() -> None:
    # 12 rps on 2 replicas the model says carry 10: no negative headroom, the
    # hours are counted and flagged; the other 23 hours keep theirs.
    out = headroom_days(_hours([12.0] + [3.5] * 23)).iloc[0]
    assert out["underestimated_hours"] == 1
    assert out["headroom_gpu_hours"] == pytest.approx(23 * 0.5 * 2.0)
    row = headroom(_hours([12.0]).assign(cost=1.0))
    assert row["note"].iloc[0] == UNDERESTIMATES
    assert row["headroom_share"].iloc[0] == 0.0


def test_a_day_with_a_scrape_gap_or_unknown_gpu_seconds_has_no_headroom() -> None:
    # 18 hours of rows, the first after the gap carrying its counters' jump.
    gap = headroom_days(_hours([40.0] + [3.5] * 17)).iloc[0]
    assert not gap["complete"] and np.isnan(gap["headroom_gpu_hours"])
    assert gap["underestimated_hours"] == 0  # the jump is not the model's fault
    unknown = _hours([3.5] * 24)
    unknown.loc[5, "gpu_hours"] = np.nan
    out = headroom_days(unknown).iloc[0]
    assert np.isnan(out["gpu_hours"]) and np.isnan(out["headroom_gpu_hours"])


def test_no_capacity_model_leaves_headroom_unknown_but_gpu_hours_known() -> None:
    out = headroom_days(_hours([3.5] * 24, capacity_per_replica=[np.nan] * 24))
    assert out["complete"].iloc[0] and out["gpu_hours"].iloc[0] == 48.0
    assert np.isnan(out["headroom_gpu_hours"].iloc[0])


def test_a_calibrated_day_and_a_per_row_target_utilisation() -> None:
    # Target 0.5: 2 x 5 x 0.5 = 5 usable; 2.5 rps leaves half.
    out = headroom_days(
        _hours([2.5] * 24, calibrated=[True] * 24, target_utilisation=[0.5] * 24)
    ).iloc[0]
    assert out["estimate"] == "calibrated"
    assert out["headroom_gpu_hours"] == pytest.approx(24.0)


def test_scaled_to_zero_is_no_headroom_not_an_unknown_one() -> None:
    out = headroom_days(
        _hours([0.0] * 24, replicas=[0.0] * 24, gpu_hours=[0.0] * 24)
    ).iloc[0]
    assert out["headroom_gpu_hours"] == 0.0


def test_idle_gpu_hours_are_priced_at_the_periods_cost_per_gpu_hour() -> None:
    idle = pd.Series([12.0, 0.0, 3.0])
    out = at_rate(idle, pd.Series([96.0, np.nan, 10.0]), pd.Series([48.0, 5.0, 0.0]))
    assert out.iloc[0] == pytest.approx(24.0)  # 12 h x $2 per GPU-hour
    assert out.iloc[1] == 0.0  # no idle is $0 whatever the price
    assert np.isnan(out.iloc[2])  # no GPU-hours: no rate
