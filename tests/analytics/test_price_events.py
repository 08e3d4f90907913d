"""Known price changes (analytics.price_events, analytics.known_prices): a
rate card's effective date, a savings plan's start and its expiry are told
as ``price`` on their day, rescale the baseline from it and page at most
once; a one-off credit is not learnt as a price."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.alert_rules import Period, RuleSpec, transitions
from analytics.anomalies import detect
from analytics.known_prices import known_price_marks

DAYS = 84
CHANGE_DAY = 49


def _series(seed: int, noise: float, ratio: float, *, told: str = "") -> pd.DataFrame:
    """A deployment's days: weekly traffic, a fleet that follows it, price
    noise of ``noise`` (relative), the price times ``ratio`` from
    ``CHANGE_DAY`` on, marked with ``told`` on that day."""
    rng = np.random.default_rng(seed)
    t = np.arange(DAYS)
    weekly = np.where(pd.date_range("2026-01-05", periods=DAYS).weekday >= 5, 0.7, 1.0)
    requests = 20_000 * weekly * (1 + 0.02 * rng.standard_normal(DAYS))
    gpu_hours = 120 * (0.5 + 0.5 * weekly) * (1 + 0.02 * rng.standard_normal(DAYS))
    price = 3.0 * np.where(t >= CHANGE_DAY, ratio, 1.0)
    price = price * (1 + noise * rng.standard_normal(DAYS))
    return pd.DataFrame(
        {
            "series": "chat",
            "day": pd.date_range("2026-01-05", periods=DAYS),
            "cost": gpu_hours * price,
            "requests": requests,
            "gpu_hours": gpu_hours,
            "price_change": np.where(t == CHANGE_DAY, told, ""),
        }
    )


RULES = [
    RuleSpec(
        condition, direction, ratio=1.2 if condition == "ratio" else None, for_periods=n
    )
    for condition in ("band", "ratio", "anomaly", "price")
    for direction in ("above", "below")
    for n in (1, 2)
]


def _pages(found: pd.DataFrame, rule: RuleSpec) -> int:
    periods = [
        Period(
            start=datetime.combine(day.date(), datetime.min.time(), UTC),
            value=u,
            baseline=b,
            lower=lo,
            upper=hi,
            volume=1e6,
            flag=flag,
            price_part=part,
        )
        for day, u, b, lo, hi, flag, part in zip(
            found["day"],
            found["cost_per_1k"],
            found["baseline"],
            found["lower"],
            found["upper"],
            found["flag"],
            found["price"],
            strict=True,
        )
    ]
    return sum(t.kind == "firing" for t in transitions(periods, rule).transitions)


CHANGES = {
    "rate card": (st.floats(0.7, 0.85) | st.floats(1.15, 1.4)),
    "savings plan started": st.floats(0.75, 0.85),
    "savings plan expired": st.floats(1 / 0.85, 1 / 0.75),
}


@pytest.mark.parametrize("cause", sorted(CHANGES))
@settings(max_examples=20, deadline=None, derandomize=True)
@given(data=st.data(), seed=st.integers(0, 10_000), noise=st.floats(0.03, 0.06))
def test_a_known_change_is_told_as_price_on_its_day_and_pages_once(
    cause: str, data: st.DataObject, seed: int, noise: float
) -> None:
    ratio = data.draw(CHANGES[cause])
    found = detect(_series(seed, noise, ratio, told=cause))
    day = found.iloc[CHANGE_DAY]
    assert day["flag"] == "price"
    assert day["cause"].startswith(f"{cause}: $/1k requests")
    assert np.sign(day["price"]) == np.sign(ratio - 1)
    for rule in RULES:
        if rule.condition == "price":
            # One page the way it moved, for a rule of one period: the flag
            # is on one day.
            way = (ratio > 1) == (rule.direction == "above")
            assert _pages(found, rule) == int(way and rule.for_periods == 1)


@pytest.mark.parametrize("cause", sorted(CHANGES))
def test_a_known_change_adds_no_pages_to_the_other_rules(cause: str) -> None:
    """Against the same series without the change (whatever its noise pages
    there pages here too), over 30 series at 3-6% noise: the band, ratio and
    anomaly rules page no more with the change than without it, at most one
    page more on any one series and rule."""
    low, high = {"rate card": (0.7, 1.4), "savings plan started": (0.75, 0.85),
                 "savings plan expired": (1 / 0.85, 1 / 0.75)}[cause]  # fmt: skip
    rng = np.random.default_rng(sorted(CHANGES).index(cause))
    extra = []
    for _ in range(30):
        seed, noise = int(rng.integers(0, 10_000)), float(rng.uniform(0.03, 0.06))
        ratio = float(rng.uniform(low, high))
        if abs(np.log(ratio)) < 0.1:
            continue
        found = detect(_series(seed, noise, ratio, told=cause))
        control = detect(_series(seed, noise, 1.0))
        extra += [
            _pages(found, rule) - _pages(control, rule)
            for rule in RULES
            if rule.condition != "price"
        ]
    assert sum(extra) <= 0.05 * len(extra)
    assert max(extra) <= 1


def test_an_unmarked_permanent_fall_is_a_saving_and_adds_no_anomalies() -> None:
    """A price cut nobody told us of (0.7x-0.9x at 3-6% noise, 30 series):
    never an ``anomaly`` on its days, and no more ``anomaly`` days in the four
    weeks after it than the same series without it (its rescale rests on two
    noisy days, which the next week settles)."""
    rng = np.random.default_rng(7)
    after = control = 0
    for _ in range(30):
        seed, noise = int(rng.integers(0, 10_000)), float(rng.uniform(0.03, 0.06))
        found = detect(_series(seed, noise, float(rng.uniform(0.7, 0.9))))
        plain = detect(_series(seed, noise, 1.0))
        assert not (found["flag"].iloc[CHANGE_DAY : CHANGE_DAY + 2] == "anomaly").any()
        window = slice(CHANGE_DAY, CHANGE_DAY + 28)
        after += int((found["flag"].iloc[window] == "anomaly").sum())
        control += int((plain["flag"].iloc[window] == "anomaly").sum())
    assert after <= control


def test_a_change_within_the_price_noise_rescales_silently() -> None:
    found = detect(_series(3, 0.03, 1.03, told="clock: final → estimated"))
    assert found["flag"].iloc[CHANGE_DAY] == ""


def test_a_credit_is_told_as_price_and_not_learnt() -> None:
    frame = _series(5, 0.03, 1.0)
    frame.loc[CHANGE_DAY, "cost"] -= 0.5 * frame.loc[CHANGE_DAY, "cost"]
    frame["price_lump"] = ""
    frame.loc[CHANGE_DAY, "price_lump"] = "credit (PromotionalCredit) -500.00 USD"
    frame["price_lump_amount"] = np.nan
    frame.loc[CHANGE_DAY, "price_lump_amount"] = -500.0
    found = detect(frame)
    missing = _series(5, 0.03, 1.0)
    missing.loc[CHANGE_DAY, "cost"] = np.nan
    plain = detect(missing)
    assert found["flag"].iloc[CHANGE_DAY] == "price"
    assert found["cause"].iloc[CHANGE_DAY].startswith("credit (PromotionalCredit)")
    # Held out: the days after compare with the same baselines as had the
    # day not been there.
    np.testing.assert_allclose(
        found["baseline"].iloc[CHANGE_DAY + 1 :],
        plain["baseline"].iloc[CHANGE_DAY + 1 :],
    )


def test_marks_read_rate_cards_and_bill_lines_not_clock_switches() -> None:
    days = pd.date_range("2026-03-01", periods=4)
    rows = []
    for scope, name in (("deployment", "chat"), ("team", "assistant"), ("fleet", "f")):
        for i, day in enumerate(days):
            rows.append({
                "scope": scope, "name": name, "currency": "USD", "period_start": day,
                "clock": "final" if i < 3 else "provisional",
                "rate_source": "rate_card" if scope == "deployment" else "mixed",
                "effective_rate": np.nan, "gpu_hours": 10.0,
                "list_cost": 10.0 * (4.0 if i < 2 else 3.0),
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    bills = pd.DataFrame({
        "deployment": "chat", "day": days, "currency": "USD", "bill_cost": 1.0,
        "bill_status": "final",
        "recurring": ["", "savings plan (SavingsPlanNegation)",
                      "savings plan (SavingsPlanNegation)", ""],
        "lump": ["", "", "credit (Promo) -5.00 USD", ""],
        "lump_amount": [np.nan, np.nan, -5.0, np.nan],
    })  # fmt: skip
    deployments = pd.DataFrame({"name": ["chat"], "team": ["assistant"], "pool": [""]})
    marks = known_price_marks(frame, bills, deployments, fleet="f")
    chat = marks[frame["scope"] == "deployment"]["price_change"].tolist()
    assert chat[0] == ""
    assert chat[1] == "started: savings plan (SavingsPlanNegation)"
    assert chat[2] == "rate card $4 → $3 per GPU-hour"
    assert chat[3] == "ended: savings plan (SavingsPlanNegation)"
    team = marks[frame["scope"] == "team"]["price_change"].tolist()
    assert team[2] == "chat: rate card $4 → $3 per GPU-hour"
    assert marks[frame["scope"] == "fleet"]["price_lump"].tolist()[2] == (
        "chat: credit (Promo) -5.00 USD"
    )
    assert marks[frame["scope"] == "fleet"]["price_lump_amount"].tolist()[2] == -5.0
