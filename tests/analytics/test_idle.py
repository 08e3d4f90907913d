from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analytics.capacity.errors import InvalidInput
from analytics.idle import headroom, paid_idle, pool_idle


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
