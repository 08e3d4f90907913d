from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.lmdi import PARTS, lmdi, lmdi_aggregate, logmean


def _row(**kw: float) -> pd.DataFrame:
    return pd.DataFrame([kw])


def test_logmean_is_the_logarithmic_mean_and_its_limit() -> None:
    assert logmean(2.0, 1.0) == pytest.approx(1.0 / math.log(2.0))
    assert logmean(3.0, 3.0) == pytest.approx(3.0)
    assert logmean(1.0 + 1e-14, 1.0) == pytest.approx(1.0)


def test_more_gpu_hours_at_unchanged_traffic_is_all_fleet() -> None:
    # GPU-hours 144 -> 216 at $2/GPU-h, 1M requests, 200M tokens both days.
    out = lmdi(
        _row(
            cost=432.0,
            gpu_hours=216.0,
            tokens=2e8,
            requests=1e6,
            cost_b=288.0,
            gpu_hours_b=144.0,
            tokens_b=2e8,
            requests_b=1e6,
        )
    ).iloc[0]
    assert out["u"] == pytest.approx(0.432)
    assert out["u_b"] == pytest.approx(0.288)
    assert out["fleet"] == pytest.approx(0.144)
    assert out["price"] == pytest.approx(0.0, abs=1e-15)
    assert out["traffic"] == pytest.approx(0.0, abs=1e-15)
    assert out["size"] == pytest.approx(0.0, abs=1e-15)
    assert out["reason"] == ""


def test_hand_computed_split_of_a_mixed_change() -> None:
    # Price 2 -> 2.2 (+10%), GPU-h 100 -> 100, tokens 1e8 -> 8e7, requests
    # 5e5 -> 5e5: u 0.4 -> 0.44; L = 0.04 / ln 1.1.
    out = lmdi(
        _row(
            cost=220.0,
            gpu_hours=100.0,
            tokens=8e7,
            requests=5e5,
            cost_b=200.0,
            gpu_hours_b=100.0,
            tokens_b=1e8,
            requests_b=5e5,
        )
    ).iloc[0]
    weight = 0.04 / math.log(1.1)
    assert out["price"] == pytest.approx(weight * math.log(1.1))
    assert out["traffic"] == pytest.approx(weight * math.log(1e8 / 8e7))
    assert out["size"] == pytest.approx(weight * math.log(0.8))
    assert out["traffic"] + out["size"] == pytest.approx(0.0, abs=1e-15)
    assert out["cost"] == pytest.approx(out["price"] + out["fleet"])


def test_zero_requests_or_negative_cost_has_no_decomposition_and_says_why() -> None:
    frame = pd.DataFrame(
        {
            "cost": [10.0, -5.0, 10.0],
            "requests": [0.0, 1000.0, 1000.0],
            "cost_b": [10.0, 10.0, 10.0],
            "requests_b": [1000.0, 1000.0, np.nan],
        }
    )
    out = lmdi(frame)
    assert out["reason"].tolist() == [
        "no finished requests",
        "cost is zero or negative (credits)",
        "no baseline",
    ]
    assert out[["cost", "traffic"]].isna().all().all()
    assert math.isnan(out["u"][0])  # missing, not infinite


def test_without_gpu_hours_only_the_cost_part_exists() -> None:
    out = lmdi(_row(cost=130.0, requests=1e5, cost_b=100.0, requests_b=1e5)).iloc[0]
    assert math.isnan(out["price"]) and math.isnan(out["fleet"])
    assert math.isnan(out["size"])
    assert out["cost"] == pytest.approx(out["delta"])
    assert out["traffic"] == pytest.approx(0.0, abs=1e-15)


positive = st.floats(1e-3, 1e7, allow_nan=False, allow_infinity=False)


@given(st.lists(positive, min_size=8, max_size=8))
def test_parts_sum_to_the_change_with_no_residual(x: list[float]) -> None:
    c, g, t, r, cb, gb, tb, rb = x
    out = lmdi(
        _row(
            cost=c,
            gpu_hours=g,
            tokens=t,
            requests=r,
            cost_b=cb,
            gpu_hours_b=gb,
            tokens_b=tb,
            requests_b=rb,
        )
    ).iloc[0]
    total = sum(out[p] for p in PARTS)
    assert total == pytest.approx(out["delta"], rel=1e-9, abs=1e-12 * abs(out["u"]))
    # Each part has the sign of its factor's log-change (traffic's factor is 1/T).
    logs = {
        "price": math.log((c / g) / (cb / gb)),
        "fleet": math.log(g / gb),
        "traffic": -math.log(t / tb),
        "size": math.log((t / r) / (tb / rb)),
    }
    for part, lg in logs.items():
        if abs(lg) > 1e-9:
            assert math.copysign(1, out[part]) == math.copysign(1, lg)


@given(positive, positive, positive, positive, st.floats(0.1, 10.0))
def test_a_part_is_zero_when_its_factor_is_unchanged(
    g: float, t: float, r: float, price: float, k: float
) -> None:
    # Only the fleet moves (price, tokens, requests fixed): everything but fleet is 0.
    out = lmdi(
        _row(
            cost=price * g * k,
            gpu_hours=g * k,
            tokens=t,
            requests=r,
            cost_b=price * g,
            gpu_hours_b=g,
            tokens_b=t,
            requests_b=r,
        )
    ).iloc[0]
    scale = abs(out["u"]) + abs(out["u_b"])
    for part in ("price", "traffic", "size"):
        assert abs(out[part]) <= 1e-9 * scale
    assert out["fleet"] == pytest.approx(out["delta"], rel=1e-9, abs=1e-12 * scale)


@given(st.lists(positive, min_size=8, max_size=8), st.permutations(range(4)))
def test_parts_do_not_depend_on_the_order_of_the_factors(
    x: list[float], order: list[int]
) -> None:
    # LMDI weights every factor by the same L(u1, u0): reordering the factor
    # columns (here: the input columns) cannot change any part.
    names = ["cost", "gpu_hours", "tokens", "requests"]
    row = dict(zip(names + [n + "_b" for n in names], x, strict=True))
    shuffled = {n: row[n] for i in order for n in (names[i], names[i] + "_b")}
    a = lmdi(_row(**row)).iloc[0]
    b = lmdi(_row(**shuffled)).iloc[0]
    for part in PARTS:
        assert a[part] == b[part]


def _team(c: dict[str, tuple[float, float, float, float]], **over: float) -> list[dict]:
    rows = []
    for name, (cost, g, t, r) in c.items():
        rows.append(
            {
                "team": "t",
                "deployment": name,
                "cost": cost,
                "gpu_hours": g,
                "tokens": t,
                "requests": r,
            }
        )
    return rows


def test_team_parts_with_idle_and_mix_sum_to_the_change() -> None:
    now = _team({"a": (100.0, 50.0, 1e7, 1e5), "b": (300.0, 100.0, 4e7, 1e5)})
    base = _team({"a": (100.0, 50.0, 1e7, 1.5e5), "b": (300.0, 100.0, 4e7, 0.5e5)})
    frame = pd.DataFrame(now)
    for col in ("cost", "gpu_hours", "tokens", "requests"):
        frame[col + "_b"] = [r[col] for r in base]
    idle = {"team": "t", "deployment": "__idle__", "cost": 60.0, "cost_b": 40.0}
    frame = pd.concat([frame, pd.DataFrame([idle])], ignore_index=True)
    out = lmdi_aggregate(frame, keys=["team"]).iloc[0]
    # U = 460 / 2e5 * 1000 = 2.3; U_b = 440 / 2e5 * 1000 = 2.2.
    assert out["u"] == pytest.approx(2.3)
    assert out["u_b"] == pytest.approx(2.2)
    parts = ["price", "fleet", "traffic", "size", "idle", "mix"]
    assert sum(out[p] for p in parts) == pytest.approx(0.1, rel=1e-12)
    assert out["idle"] > 0  # more idle dollars per deployment dollar
    assert out["price"] == pytest.approx(0.0, abs=1e-12)


def test_a_deployment_that_appears_is_entry_in_mix() -> None:
    frame = pd.DataFrame(
        [
            {
                "team": "t",
                "deployment": "a",
                "cost": 100.0,
                "requests": 1e5,
                "cost_b": 100.0,
                "requests_b": 1e5,
            },
            {
                "team": "t",
                "deployment": "new",
                "cost": 50.0,
                "requests": 1e4,
                "cost_b": np.nan,
                "requests_b": np.nan,
            },
        ]
    )
    out = lmdi_aggregate(frame, keys=["team"]).iloc[0]
    total = out["cost"] + out["traffic"] + out["mix"] + out["idle"]
    assert total == pytest.approx(out["delta"], rel=1e-12)
    assert out["mix"] > 0


def test_a_team_with_its_own_baseline_is_explained_against_it() -> None:
    frame = pd.DataFrame(
        {
            "team": "t",
            "deployment": ["a", "b", "__idle__"],
            "cost": [100.0, 300.0, 60.0],
            "requests": [1e5, 1e5, np.nan],
            "cost_b": [90.0, 310.0, 40.0],
            "requests_b": [1.5e5, 0.5e5, np.nan],
        }
    )
    totals = pd.DataFrame({"team": ["t"], "cost_b": [400.0], "requests_b": [2.5e5]})
    out = lmdi_aggregate(frame, keys=["team"], baseline_totals=totals).iloc[0]
    assert out["u_b"] == pytest.approx(400.0 / 2.5e5 * 1000)
    parts = out[["cost", "traffic", "idle", "mix"]].sum()
    assert parts == pytest.approx(out["u"] - out["u_b"], rel=1e-12)


def test_an_aggregate_never_adds_currencies() -> None:
    from analytics.errors import InvalidInput

    frame = pd.DataFrame(
        {
            "team": "t",
            "deployment": ["a", "b"],
            "currency": ["USD", "EUR"],
            "cost": [1.0, 1.0],
            "requests": [1e3, 1e3],
            "cost_b": [1.0, 1.0],
            "requests_b": [1e3, 1e3],
        }
    )
    with pytest.raises(InvalidInput, match="currenc"):
        lmdi_aggregate(frame, keys=["team"])
    out = lmdi_aggregate(frame, keys=["team", "currency"])
    assert len(out) == 2
