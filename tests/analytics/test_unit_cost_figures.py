"""The unit-cost recompute's arithmetic on a small hand-made fleet, without a
database: what ``figures_compute`` returns, what it leaves alone, and where
an incremental recompute starts (the stored figures against hand-computed
ones are tests/economics/test_recompute.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analytics.baselines import BaselineConfig
from analytics.unit_cost_figures import (
    MONEY_COLUMNS,
    NOTE_OPEN,
    NUMBER_COLUMNS,
    FiguresComputed,
    _aggregate_parts,
    _detected,
    figures_compute,
)
from analytics.unit_cost_frames import RecomputeInputs, figure_frames
from analytics.unit_cost_resume import (
    baseline_config,
    first_rewritten,
    latest_resume_day,
    resumable,
)

START = pd.Timestamp("2026-10-05")  # a Monday
DAYS = 42
SPIKE = 35  # deployment a's bill triples that day
NOW = START + pd.Timedelta(days=DAYS, hours=1)
SETTLE = pd.Timedelta(minutes=10)
STORED = {
    "scope", "name", "grain", "period_start", "currency", "clock", "rate_source",
    *MONEY_COLUMNS, *NUMBER_COLUMNS, "flag", "cause", "parts", "level_shift",
    "warm", "note", "complete",
}  # fmt: skip


def _inputs() -> RecomputeInputs:
    """Team t runs a and b in pool p, team u runs c alone: 48 GPU-hours a day
    each at $1 an hour billed, pool p's idle $10 a day and $5 unallocated,
    the last two days not billed yet and the last three hours read early."""
    deployments = pd.DataFrame(
        {"name": ["a", "b", "c"], "team": ["t", "t", "u"], "pool": ["p", "p", ""]}
    )
    stamps = pd.date_range(START, periods=DAYS * 24, freq="h")
    requests = np.full(len(stamps), 400.0)
    hours = pd.concat(
        [
            pd.DataFrame(
                {
                    "deployment": name,
                    "team": team,
                    "pool": pool,
                    "period_start": stamps,
                    "day": stamps.normalize(),
                    "requests": requests,
                    "requests_length": 0.0,
                    "prompt_tokens": requests * 500,
                    "generation_tokens": requests * 200,
                    "gpu_hours": 2.0,
                    "replicas": 2.0,
                    "rate_card": 1.25,
                    "currency": "USD",
                    "complete": stamps < NOW - pd.Timedelta(hours=4),
                }
            )
            for name, team, pool in deployments.itertuples(index=False)
        ],
        ignore_index=True,
    )
    billed = list(enumerate(pd.date_range(START, periods=DAYS - 2)))
    bills = pd.DataFrame(
        [
            (d, day, "USD", 48.0 * (3 if (d, i) == ("a", SPIKE) else 1), "final")
            for d in ("a", "b", "c")
            for i, day in billed
        ],
        columns=["deployment", "day", "currency", "bill_cost", "bill_status"],
    )
    overheads = pd.DataFrame(
        [("p", "idle", day, "USD", 10.0, "final") for _, day in billed]
        + [("", "unallocated", day, "USD", 5.0, "final") for _, day in billed],
        columns=["pool", "kind", "day", "currency", "amount", "bill_status"],
    )
    return RecomputeInputs(
        hours=hours, bills=bills, overheads=overheads, deployments=deployments
    )


def test_it_returns_every_stored_column_per_grain_and_mutates_nothing() -> None:
    inputs = _inputs()
    before = {
        name: getattr(inputs, name).copy(deep=True)
        for name in ("hours", "bills", "overheads", "deployments", "holidays")
    }
    computed = figures_compute(
        inputs, fleet="fleet", series=None, cutoff=None, saved={}, now=NOW,
        settle=SETTLE,
    )  # fmt: skip
    assert list(computed.figures) == ["day", "week", "month", "hour"]
    for grain, rows in computed.figures.items():
        assert set(rows.columns) == STORED
        assert (rows["grain"] == grain).all()
    for name, frame in before.items():
        pd.testing.assert_frame_equal(getattr(inputs, name), frame)
    assert computed.series is None
    assert computed.flagged == sum(
        int((rows["flag"] != "").sum()) for rows in computed.figures.values()
    )
    assert {g: s.resumed_at for g, s in computed.states.items()} == {
        "day": None,
        "hour": None,
    }


def test_a_flagged_team_day_takes_the_fully_loaded_parts_with_idle_and_mix() -> None:
    day = figures_compute(
        _inputs(), fleet="fleet", series=None, cutoff=None, saved={}, now=NOW,
        settle=SETTLE,
    ).figures["day"]  # fmt: skip
    spike = START + pd.Timedelta(days=SPIKE)
    flagged = day[(day["flag"] != "") & (day["period_start"] == spike)]
    by_series = {(s, n): p for s, n, p in flagged[["scope", "name", "parts"]].values}
    assert set(by_series) >= {("deployment", "a"), ("team", "t"), ("fleet", "fleet")}
    assert "idle" not in by_series[("deployment", "a")]
    for aggregate in (("team", "t"), ("fleet", "fleet")):
        assert {"idle", "mix"} <= set(by_series[aggregate])


def test_the_aggregate_parts_come_back_in_a_new_frame() -> None:
    inputs = _inputs()
    frames = figure_frames(inputs, fleet="fleet")
    frame = frames["day"]
    found, _ = _detected(frame, "day")
    kept = found.copy(deep=True)
    out = _aggregate_parts(frame, found, frames["members"], frame)
    pd.testing.assert_frame_equal(found, kept)
    # A known price day keeps its own parts (against the price before it).
    team = ((frame["scope"] == "team") & ~found["flag"].isin(["", "price"])).to_numpy()
    assert team.any()
    assert out.loc[team, "idle"].notna().all() and found.loc[team, "idle"].isna().all()


def test_a_period_in_progress_is_shown_never_judged() -> None:
    hour = figures_compute(
        _inputs(), fleet="fleet", series=None, cutoff=None, saved={}, now=NOW,
        settle=SETTLE,
    ).figures["hour"]  # fmt: skip
    open_ = hour[~hour["complete"]]
    assert len(open_)
    assert (open_["flag"] == "").all() and (open_["cause"] == "").all()
    assert not open_["level_shift"].any()
    assert all(parts == {} for parts in open_["parts"])
    assert open_["note"].str.contains(NOTE_OPEN).all()


def test_from_a_cutoff_days_start_there_and_weeks_and_months_whole() -> None:
    cutoff = START + pd.Timedelta(days=38)  # a Wednesday in November
    computed = figures_compute(
        _inputs(), fleet="fleet", series=["c"], cutoff=cutoff, saved={}, now=NOW,
        settle=SETTLE,
    )  # fmt: skip
    assert computed.series == {("deployment", "c"), ("team", "u"), ("fleet", "fleet")}
    firsts = {g: rows["period_start"].min() for g, rows in computed.figures.items()}
    # The two days before the cutoff (their flags read the days after them:
    # analytics.sustained.settled_runs) and the hours of the day before it.
    assert firsts == {
        "day": cutoff - pd.Timedelta(days=2),
        "hour": cutoff - pd.Timedelta(days=1),
        "week": pd.Timestamp("2026-11-09"),
        "month": pd.Timestamp("2026-11-01"),
    }
    assert first_rewritten(cutoff, "week") == pd.Timestamp("2026-11-09")
    # A day before the first rewritten period, which reads its neighbour.
    assert latest_resume_day(cutoff, "day") == pd.Timestamp("2026-10-31")
    assert latest_resume_day(cutoff, "hour") == cutoff - pd.Timedelta(days=2)


def _saved_before(full: FiguresComputed, latest: pd.Timestamp) -> pd.Timestamp:
    """The day of the latest state ``full`` saved up to ``latest``."""
    return max(day for day in full.states["day"].states if day <= latest)


def test_a_saved_state_resumes_only_where_it_knows_every_earlier_series() -> None:
    inputs = _inputs()
    full = figures_compute(
        inputs, fleet="fleet", series=None, cutoff=None, saved={}, now=NOW,
        settle=SETTLE,
    )  # fmt: skip
    cutoff = START + pd.Timedelta(days=38)
    day = _saved_before(full, latest_resume_day(cutoff, "day"))
    state = full.states["day"].states[day]
    frame = figure_frames(inputs, fleet="fleet")["day"]
    assert resumable(state, frame, "day") is state
    assert resumable(state, frame, "hour") is None  # another configuration
    assert resumable(None, frame, "day") is None
    stranger = frame.assign(name=frame["name"] + "-new")
    assert resumable(state, stranger, "day") is None
    assert baseline_config("week") == BaselineConfig(grain="hour")


def test_resumed_from_a_saved_state_the_figures_equal_the_full_run() -> None:
    inputs = _inputs()
    full = figures_compute(
        inputs, fleet="fleet", series=None, cutoff=None, saved={}, now=NOW,
        settle=SETTLE,
    )  # fmt: skip
    cutoff = START + pd.Timedelta(days=38)
    day = _saved_before(full, latest_resume_day(cutoff, "day"))
    resumed = figures_compute(
        inputs, fleet="fleet", series=None, cutoff=cutoff,
        saved={"day": full.states["day"].states[day]}, now=NOW, settle=SETTLE,
    )  # fmt: skip
    assert resumed.states["day"].resumed_at == day
    assert resumed.states["hour"].resumed_at is None  # no hourly state given
    for grain in ("day", "week", "month"):
        key = ["scope", "name", "period_start"]
        again = resumed.figures[grain].set_index(key)
        whole = full.figures[grain].set_index(key).loc[again.index]
        for column in (
            "cost",
            "baseline",
            "cost_per_1k_requests",
            "cost_per_1m_tokens",
        ):
            np.testing.assert_allclose(
                again[column].to_numpy(float), whole[column].to_numpy(float),
                rtol=1e-9,
            )  # fmt: skip
        assert again["flag"].tolist() == whole["flag"].tolist()
        assert again["note"].tolist() == whole["note"].tolist()
