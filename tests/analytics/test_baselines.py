from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.baselines import BaselineConfig, baselines_compute, warmup_days
from analytics.capacity.errors import InvalidInput

MONDAY = pd.Timestamp("2026-01-05")


def _days(n: int, **cols: object) -> pd.DataFrame:
    frame = pd.DataFrame(
        {"series": "a", "period_start": pd.date_range(MONDAY, periods=n)}
    )
    for name, value in cols.items():
        frame[name] = value
    return frame


def _weekly(n: int, weekend: float = 0.6) -> np.ndarray:
    days = pd.date_range(MONDAY, periods=n)
    return np.where(days.weekday >= 5, weekend, 1.0)


def test_the_baseline_is_the_ratio_of_the_slot_ewmas_hand_computed() -> None:
    # Mondays only matter for Monday: costs 100, 200 with requests 1e5, 1e5.
    # Half-life 1 observation: EWMA weights 1/2, 1 -> cost_b = (50 + 200) / 1.5.
    cfg = BaselineConfig(halflife_obs=1.0, min_obs=1, band_floor=1.0)  # no flags
    frame = _days(15, cost=100.0, requests=1e5)
    frame.loc[7, "cost"] = 200.0
    out = baselines_compute(frame, config=cfg)
    assert out.loc[7, "baseline"] == pytest.approx(1.0)
    assert out.loc[14, "cost_b"] == pytest.approx((0.5 * 100 + 200) / 1.5)
    assert out.loc[14, "baseline"] == pytest.approx(1000 * out.loc[14, "cost_b"] / 1e5)
    assert np.isnan(out.loc[0, "baseline"])  # nothing before the first Monday


def test_zero_requests_have_no_unit_cost_and_do_not_update() -> None:
    frame = _days(22, cost=100.0, requests=1e5)
    frame.loc[7, "requests"] = 0.0
    frame.loc[14, "cost"] = -40.0  # a credit
    out = baselines_compute(frame)
    assert np.isnan(out.loc[7, "u"]) and np.isnan(out.loc[14, "u"])
    assert not out.loc[[7, 14], "flag"].any()
    assert out.loc[21, "baseline"] == pytest.approx(1.0)


def test_days_under_the_minimum_volume_never_flag() -> None:
    frame = _days(35, cost=100.0, requests=1e5)
    frame.loc[28, ["cost", "requests"]] = [100.0, 50.0]  # u 2000x, 50 requests
    out = baselines_compute(frame)
    assert not out.loc[28, "flag"]
    assert not out.loc[28, "volume_ok"]


def test_a_new_series_is_warm_after_three_weeks_of_days() -> None:
    out = baselines_compute(_days(30, cost=100.0, requests=1e5))
    assert warmup_days(BaselineConfig()) == 21
    assert not out.loc[:20, "warm"].any()
    assert out.loc[21:, "warm"].all()


def test_a_long_incident_becomes_a_level_shift_after_the_hold() -> None:
    cost = np.full(60, 100.0)
    cost[30:] = 150.0
    out = baselines_compute(_days(60, cost=cost, requests=1e5))
    # Held out for hold_days (14) days, then the new level is accepted.
    assert out.loc[30:43, "flag"].all()
    assert out["level_shift"].sum() == 1
    assert out.loc[43, "level_shift"]
    assert not out.loc[44:, "flag"].any()
    assert out.loc[50, "baseline"] == pytest.approx(1.5)


def test_holidays_are_held_out_of_the_update() -> None:
    frame = _days(29, cost=100.0, requests=1e5, holiday=False)
    frame.loc[21, ["requests", "holiday"]] = [0.5e5, True]
    out = baselines_compute(frame)
    assert out.loc[21, "flag"] and out.loc[21, "held"]
    assert out.loc[28, "baseline"] == pytest.approx(1.0)  # Monday slot untouched


def test_hourly_rows_use_weekday_or_weekend_by_hour_slots() -> None:
    hours = pd.date_range(MONDAY, periods=24 * 21, freq="h")
    req = np.where(hours.hour < 8, 2e3, 1e4) * np.where(hours.weekday >= 5, 0.5, 1.0)
    frame = pd.DataFrame(
        {"series": "a", "period_start": hours, "cost": 10.0, "requests": req}
    )
    out = baselines_compute(frame, config=BaselineConfig(grain="hour"))
    late = out.iloc[24 * 14 :]
    assert late["warm"].all()
    assert not late["flag"].any()
    np.testing.assert_allclose(late["baseline"], late["u"])


def test_two_rows_for_one_period_are_refused() -> None:
    frame = pd.concat([_days(2, cost=1.0, requests=1e3)] * 2, ignore_index=True)
    with pytest.raises(InvalidInput, match="two rows"):
        baselines_compute(frame)


def test_all_series_are_computed_at_once_and_independently() -> None:
    a = _days(40, cost=100.0, requests=1e5)
    b = _days(40, cost=np.linspace(50, 80, 40), requests=2e5).assign(series="b")
    both = baselines_compute(pd.concat([a, b], ignore_index=True))
    alone = baselines_compute(b)
    np.testing.assert_allclose(both["baseline"].iloc[40:], alone["baseline"])


# --- properties ------------------------------------------------------------

volumes = st.floats(1e3, 1e7)
series_len = 42


@given(st.floats(1e-2, 1e5), volumes)
def test_a_constant_series_has_a_constant_baseline_equal_to_it(
    c: float, r: float
) -> None:
    out = baselines_compute(_days(series_len, cost=c, requests=r))
    known = out["baseline"].dropna()
    assert len(known) == series_len - 7
    np.testing.assert_allclose(known, 1000 * c / r, rtol=1e-12)
    assert not out["flag"].any()


noisy = st.lists(st.floats(0.5, 2.0), min_size=series_len, max_size=series_len)


@given(noisy, noisy, st.floats(1e-3, 1e3))
def test_scaling_the_cost_scales_the_baseline_and_its_band(
    cost: list[float], req: list[float], k: float
) -> None:
    frame = _days(series_len, cost=np.array(cost) * 100, requests=np.array(req) * 1e5)
    base = baselines_compute(frame)
    scaled = baselines_compute(frame.assign(cost=frame["cost"] * k))
    for col in ("baseline", "lower", "upper"):
        np.testing.assert_allclose(scaled[col], base[col] * k, rtol=1e-9)
    assert (scaled["flag"] == base["flag"]).all()


@given(noisy, noisy)
def test_the_baseline_stays_within_the_series_range(
    cost: list[float], req: list[float]
) -> None:
    frame = _days(series_len, cost=np.array(cost) * 100, requests=np.array(req) * 1e5)
    out = baselines_compute(frame)
    u = 1000 * frame["cost"] / frame["requests"]
    known = out["baseline"].notna()
    assert (out.loc[known, "baseline"] >= u.min() * (1 - 1e-12)).all()
    assert (out.loc[known, "baseline"] <= u.max() * (1 + 1e-12)).all()


@given(noisy, noisy, st.integers(0, series_len - 1), st.floats(0.1, 10.0))
def test_changing_values_at_or_after_t_leaves_the_baseline_at_t_unchanged(
    cost: list[float], req: list[float], t: int, factor: float
) -> None:
    frame = _days(series_len, cost=np.array(cost) * 100, requests=np.array(req) * 1e5)
    before = baselines_compute(frame)
    changed = frame.copy()
    changed.loc[t:, "cost"] *= factor
    changed.loc[t:, "requests"] /= factor**0.5
    after = baselines_compute(changed)
    for col in ("baseline", "lower", "upper", "cost_b", "requests_b"):
        np.testing.assert_array_equal(
            after[col].iloc[: t + 1], before[col].iloc[: t + 1]
        )


@given(st.floats(1e-2, 1e4), volumes, st.sampled_from(["cost", "requests"]))
def test_a_noiseless_weekly_pattern_gives_no_flag_after_warm_up(
    c: float, r: float, which: str
) -> None:
    pattern = _weekly(70)
    cost = c * pattern if which == "cost" else c
    req = r * pattern if which == "requests" else r
    out = baselines_compute(_days(70, cost=cost, requests=req))
    assert out["warm"].iloc[21:].all()
    assert not out["flag"].any()


@given(
    st.floats(1e-2, 1e4), volumes, st.integers(21, 60),
    st.lists(st.floats(0.98, 1.02), min_size=70, max_size=70),
)  # fmt: skip
def test_a_30_percent_cost_step_at_unchanged_traffic_is_flagged_on_its_first_day(
    c: float, r: float, start: int, noise: list[float]
) -> None:
    cost = c * np.array(noise)
    cost[start:] *= 1.3
    out = baselines_compute(_days(70, cost=cost, requests=r, gpu_hours=cost / 2.0))
    assert out.loc[start, "flag"]
    assert not out.loc[: start - 1, "flag"].any()


# --- resuming from a saved state (the incremental recompute) ---------------


def _fleet(n_days: int = 70) -> pd.DataFrame:
    from bench.anomaly_series import generate

    frame = generate(3, n_series=4, n_days=n_days)
    return frame[
        ["series", "day", "cost", "gpu_hours", "tokens", "requests", "holiday"]
    ]


def test_resuming_from_a_checkpoint_equals_the_full_run() -> None:
    from analytics.baselines import baselines_run

    frame = _fleet()
    cut = pd.Timestamp("2025-02-10")
    full = baselines_run(frame, time="day", checkpoints=[cut])
    later = frame[frame["day"] >= cut]
    resumed = baselines_run(later, time="day", initial=full.checkpoints[cut])
    pd.testing.assert_frame_equal(resumed.figures, full.figures.loc[later.index])


def test_a_restated_day_recomputes_from_the_checkpoint_before_it_for_that_series_only() -> (
    None
):
    from analytics.baselines import BaselineState, baselines_run

    frame = _fleet()
    cut = pd.Timestamp("2025-02-10")
    stored = baselines_run(frame, time="day", checkpoints=[cut])
    restated = frame.copy()
    changed = (restated["series"] == "s003-02") & (restated["day"] == "2025-02-14")
    restated.loc[changed, "cost"] *= 1.7
    reference = baselines_run(restated, time="day").figures  # the full recompute
    blob = stored.checkpoints[cut].to_bytes()  # as the caller would store it
    state = BaselineState.from_bytes(blob).select([("s003-02",)])
    rows = restated[(restated["series"] == "s003-02") & (restated["day"] >= cut)]
    incremental = baselines_run(rows, time="day", initial=state).figures
    np.testing.assert_allclose(
        incremental[["baseline", "lower", "upper", "cost_b"]].to_numpy(),
        reference.loc[rows.index, ["baseline", "lower", "upper", "cost_b"]].to_numpy(),
        rtol=1e-12,
        equal_nan=True,
    )
    assert (incremental["flag"] == reference.loc[rows.index, "flag"]).all()
    # The other series' stored figures are still right: nothing else changed.
    others = frame.index[frame["series"] != "s003-02"]
    pd.testing.assert_frame_equal(stored.figures.loc[others], reference.loc[others])


def test_a_state_refuses_rows_before_its_day_and_another_configuration() -> None:
    from analytics.baselines import baselines_run

    frame = _fleet()
    cut = pd.Timestamp("2025-02-03")
    state = baselines_run(frame, time="day", checkpoints=[cut]).checkpoints[cut]
    with pytest.raises(InvalidInput, match="before the state's day"):
        baselines_run(frame, time="day", initial=state)
    with pytest.raises(InvalidInput, match="another configuration"):
        baselines_run(
            frame[frame["day"] >= cut], time="day", initial=state,
            config=BaselineConfig(band_k=9.0),
        )  # fmt: skip


def test_the_per_token_band_learns_the_spread_of_dollars_per_token() -> None:
    # One weekday slot, constant cost and requests; tokens alternate 1e6 and
    # 1.2e6, so $/token swings while $/request does not move.
    days = pd.date_range("2026-01-05", periods=12, freq="7D")
    tokens = [1e6, 1.2e6] * 6
    frame = pd.DataFrame(
        {"series": "s", "period_start": days, "cost": 100.0, "requests": 1000.0,
         "tokens": tokens}
    )  # fmt: skip
    out = baselines_compute(frame)
    # Row 1: the state is row 0 alone: $100 over 1e6 tokens.
    assert out["baseline_per_1m_tokens"].iat[1] == pytest.approx(100.0)
    # Row 2: the slot EWMA (half-life 2 obs, a = 2^-1/2) of tokens.
    a = 0.5**0.5
    tokens_b = (a * 1e6 + 1.2e6) / (a + 1)
    assert out["baseline_per_1m_tokens"].iat[2] == pytest.approx(100.0 / tokens_b * 1e6)
    # $ per 1k requests never moved: its sigma sits on the floor, the token
    # band widened beyond it.
    last = out.iloc[-1]
    assert last["sigma"] == pytest.approx(0.06)
    assert last["sigma_tokens"] > 0.06
    assert last["upper_per_1m_tokens"] == pytest.approx(
        last["baseline_per_1m_tokens"] * math.exp(2.5 * last["sigma_tokens"])
    )
    assert not out["flag"].any()
