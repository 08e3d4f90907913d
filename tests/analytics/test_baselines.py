from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.baselines import BaselineConfig, baselines_compute, warmup_days
from analytics.errors import InvalidInput

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
    cfg = BaselineConfig(  # no flags: a band too wide, no sustained detector
        halflife_obs=1.0, min_obs=1, band_floor=1.0, sustained_h=0.0
    )
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
    # Until a level shift: a fall's rescale moves every slot by the fall's
    # ratio, which takes a slot that sat above the fall's level below the
    # lowest value seen (a price cut is not bounded by past prices).
    known = out["baseline"].notna() & ~out["level_shift"].cummax()
    assert (out.loc[known, "baseline"] >= u.min() * (1 - 1e-12)).all()
    assert (out.loc[known, "baseline"] <= u.max() * (1 + 1e-12)).all()


def test_a_held_run_that_becomes_the_level_is_the_level_it_held() -> None:
    """Two days at half the unit cost are taken for a price cut (the slots
    rescaled to it, settling over the next week); the cost comes back and is
    held for 14 days, which become the new level: exactly the level held, not
    moved again by the cut's settling (which once scaled the held values
    too, and left the baseline 1.8% above every value the series had)."""
    req = np.ones(series_len)
    req[25:27] = 2.0
    out = baselines_compute(_days(series_len, cost=100.0, requests=req * 1e5))
    assert out["level_shift"].iat[26] and out["level_shift"].iat[40]
    assert out["baseline"].iat[41] == pytest.approx(1.0, rel=1e-12)


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
    # $ per 1k requests never moved: its sigma sits on the floor (widened by
    # what is left of the slot's own uncertainty after 11 observations), the
    # token band widened beyond it.
    last = out.iloc[-1]
    weight = sum(a**i for i in range(11))
    widening = math.sqrt((1 + 1 / weight) / (1 + (1 - a)))
    assert last["sigma"] == pytest.approx(0.06 * widening)
    assert last["sigma_tokens"] > 0.06
    assert last["upper_per_1m_tokens"] == pytest.approx(
        last["baseline_per_1m_tokens"] * math.exp(2.5 * last["sigma_tokens"])
    )
    assert not out["flag"].any()


# --- the loop split: only what decides a flag is sequential ------------------


def _hourly_fleet(
    n_series: int, n_days: int, seed: int, step_at: int, step: float, hold: int
) -> pd.DataFrame:
    """Hours with a diurnal and weekly shape, noise, gaps, zero-request and
    low-volume hours, holidays, a cost step long enough to become a level
    shift and a launch (traffic up at once)."""
    rng = np.random.default_rng(seed)
    hours = pd.date_range(MONDAY, periods=n_days * 24, freq="h")
    n = len(hours)
    shape = np.where(hours.weekday >= 5, 0.6, 1.0) * (
        0.6 + 0.4 * np.sin(np.asarray(hours.hour) / 24 * 2 * np.pi).clip(0)
    )
    frames = []
    for i in range(n_series):
        req = 1e3 * (i + 1) * shape * rng.lognormal(0, 0.03, n)
        req[n // 2 + 24 * i :] *= 1.5  # a launch
        # Under the minimum volume (accepted: it would end a held run, so
        # none during the step, which is to become a level shift).
        calm = np.arange(n) < step_at * 24
        req[calm & (rng.random(n) < 0.03)] = 50.0
        gpu = req / 400 * rng.lognormal(0, 0.02, n)
        cost = gpu * 2.0 * rng.lognormal(0, 0.03, n)
        cost[step_at * 24 + 5 * i : (step_at + hold + 2) * 24] *= step
        tokens = req * 300 * rng.lognormal(0, 0.05, n)
        req[rng.random(n) < 0.02] = 0.0
        gpu[rng.random(n) < 0.03] = np.nan
        tokens[rng.random(n) < 0.03] = np.nan
        cost[rng.random(n) < 0.01] = -3.0  # a credit
        frame = pd.DataFrame(
            {"series": f"s{i}", "period_start": hours, "cost": cost,
             "gpu_hours": gpu, "tokens": tokens, "requests": req,
             "holiday": np.asarray(hours.normalize() == hours[0] + pd.Timedelta(
                 days=int(rng.integers(8, n_days)))),}
        )  # fmt: skip
        keep = rng.random(n) > 0.02  # missing hours
        frames.append(frame[keep])
    return pd.concat(frames, ignore_index=True)


def _with_reference_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import analytics.baselines as baselines
    from tests.analytics.baseline_reference import reference_run

    monkeypatch.setattr(baselines, "_run", reference_run)


@given(
    st.integers(1, 4), st.integers(15, 45), st.integers(0, 2**16),
    st.integers(3, 12), st.floats(1.2, 2.5), st.integers(1, 4),
    st.sampled_from(["day", "hour"]),
)  # fmt: skip
def test_the_split_loop_gives_the_figures_and_states_of_the_single_loop(
    n_series: int, n_days: int, seed: int, step_at: int, step: float, hold: int,
    grain: str,
) -> None:  # fmt: skip
    from analytics.baselines import baselines_run

    frame = _hourly_fleet(n_series, n_days, seed, step_at, step, hold)
    if grain == "day":
        frame = (
            frame.assign(period_start=frame["period_start"].dt.normalize())
            .groupby(["series", "period_start"], as_index=False)
            .agg(cost=("cost", "sum"), gpu_hours=("gpu_hours", "sum"),
                 tokens=("tokens", "sum"), requests=("requests", "sum"),
                 holiday=("holiday", "any"))
        )  # fmt: skip
    cfg = BaselineConfig(grain=grain, hold_days=hold, min_obs=2)  # type: ignore[arg-type]
    cuts = [MONDAY + pd.Timedelta(days=d) for d in (step_at, n_days // 2 + 1)]
    got = baselines_run(frame, config=cfg, checkpoints=cuts)
    with pytest.MonkeyPatch.context() as mp:
        _with_reference_loop(mp)
        want = baselines_run(frame, config=cfg, checkpoints=cuts)
    for col in want.figures.columns:
        np.testing.assert_allclose(
            got.figures[col].to_numpy(float), want.figures[col].to_numpy(float),
            rtol=1e-12, atol=0, equal_nan=True, err_msg=col,
        )  # fmt: skip
    assert want.final is not None and got.final is not None
    for day, state in [*want.checkpoints.items(), (None, want.final)]:
        mine = got.final if day is None else got.checkpoints[day]
        assert mine.arrays.keys() == state.arrays.keys()
        for name, arr in state.arrays.items():
            np.testing.assert_allclose(
                mine.arrays[name].astype(float), arr.astype(float), rtol=1e-12,
                atol=0, equal_nan=True, err_msg=f"{day} {name}",
            )  # fmt: skip


def test_the_benchmark_fleet_shifts_level_and_the_loops_agree_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case the property is sure to cover: hourly, several series, level
    shifts and holidays, resumed from a checkpoint."""
    from analytics.baselines import baselines_run

    frame = _hourly_fleet(3, 40, 7, 15, 1.8, 2)  # a Tuesday to Friday step
    cfg = BaselineConfig(grain="hour", hold_days=2)
    cut = MONDAY + pd.Timedelta(days=20)
    got = baselines_run(frame, config=cfg, checkpoints=[cut])
    assert got.figures["level_shift"].any() and got.figures["held"].any()
    resumed = baselines_run(
        frame[frame["period_start"] >= cut], config=cfg, initial=got.checkpoints[cut]
    )
    later = frame.index[frame["period_start"] >= cut]
    pd.testing.assert_frame_equal(resumed.figures, got.figures.loc[later])
    _with_reference_loop(monkeypatch)
    want = baselines_run(frame, config=cfg)
    for col in ("baseline", "lower", "upper", "sigma_price", "sigma_fleet",
                "sigma_tokens", "cost_b", "gpu_hours_b", "tokens_b", "requests_b"):  # fmt: skip
        np.testing.assert_allclose(
            got.figures[col], want.figures[col], rtol=1e-12, equal_nan=True,
            err_msg=col,
        )  # fmt: skip
    assert (got.figures["flag"] == want.figures["flag"]).all()


def test_a_state_saved_before_the_sustained_detector_resumes_with_empty_sums() -> None:
    from analytics.baselines import BaselineState, baselines_run

    frame = _days(56, cost=100.0, requests=1e5)
    full = baselines_run(frame, checkpoints=[MONDAY + pd.Timedelta(days=28)])
    state = next(iter(full.checkpoints.values()))
    old = {
        k: v
        for k, v in state.arrays.items()
        if k not in ("cusum", "run_down", "down_sum")
    }
    blob = BaselineState(state.config, state.keys, state.series, state.day, old)
    resumed = baselines_run(
        frame[frame["period_start"] >= state.day], initial=blob.select([("a",)])
    )
    np.testing.assert_array_equal(
        resumed.figures["baseline"], full.figures["baseline"].iloc[28:]
    )
    assert resumed.final is not None and resumed.final.arrays["cusum"].shape == (1,)
