from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from analytics.alert_rules import Period, RuleSpec, stale, transitions

T0 = datetime(2026, 11, 1, tzinfo=UTC)
RATIO = RuleSpec(condition="ratio", ratio=1.2, for_periods=3, repeat=timedelta(days=9))


def _hours(pattern: str, *, volume: float = 1000.0, flag: str = "") -> list[Period]:
    """'1' = 1.5 x baseline (breach of 1.2x), '0' = at baseline."""
    return [
        Period(
            start=T0 + timedelta(hours=i),
            value=1.5 if c == "1" else 1.0,
            baseline=1.0,
            lower=0.8,
            upper=1.2,
            volume=volume,
            flag=flag,
        )
        for i, c in enumerate(pattern)
    ]


def _kinds(pattern: str, rule: RuleSpec = RATIO) -> list[str]:
    return [t.kind for t in transitions(_hours(pattern), rule).transitions]


def test_a_series_alternating_hourly_in_and_out_of_breach_never_fires() -> None:
    assert _kinds("10" * 24) == []


def test_four_hours_on_then_six_alternating_then_clear_fires_once_and_resolves_once() -> (
    None
):
    outcome = transitions(_hours("1111" + "010101" + "0000"), RATIO)
    assert [t.kind for t in outcome.transitions] == ["firing", "resolved"]
    firing, resolved = outcome.transitions
    assert firing.at == T0 + timedelta(hours=2)  # the third hour in breach
    assert resolved.at == T0 + timedelta(hours=12)  # third clear hour
    assert outcome.state == "inactive"


def test_an_incident_lasting_past_the_repeat_interval_is_repeated() -> None:
    rule = RuleSpec(condition="ratio", ratio=1.2, for_periods=3)  # repeat 4 h
    outcome = transitions(_hours("1" * 12), rule)
    kinds = [t.kind for t in outcome.transitions]
    assert kinds == ["firing", "repeat", "repeat"]
    assert [t.at.hour for t in outcome.transitions] == [2, 6, 10]
    assert outcome.state == "firing"


def test_hours_under_the_minimum_volume_never_fire() -> None:
    rule = RuleSpec(condition="ratio", ratio=1.2, for_periods=1, min_volume=50)
    thin = transitions(_hours("1111", volume=10), rule)
    assert thin.transitions == ()
    assert transitions(_hours("1111", volume=60), rule).transitions[0].kind == "firing"


def test_traffic_changes_do_not_fire_unless_the_rule_asks_for_them() -> None:
    rule = RuleSpec(condition="band", for_periods=1)
    assert transitions(_hours("11", flag="traffic"), rule).transitions == ()
    asks = RuleSpec(condition="band", for_periods=1, include_traffic=True)
    assert len(transitions(_hours("11", flag="traffic"), asks).transitions) == 1


def test_missing_values_are_not_breaches_and_reset_pending() -> None:
    periods = [*_hours("11"), Period(start=T0 + timedelta(hours=2), value=None)]
    periods += [
        Period(start=T0 + timedelta(hours=3 + i), value=1.5, baseline=1.0)
        for i in range(2)
    ]
    assert transitions(periods, RATIO).transitions == ()
    assert transitions(periods, RATIO).state == "pending"


def test_keep_firing_for_holds_the_alert_through_short_gaps() -> None:
    rule = RuleSpec(
        condition="ratio",
        ratio=1.2,
        for_periods=1,
        keep_firing_for=3,
        repeat=timedelta(days=1),
    )
    assert [t.kind for t in transitions(_hours("1001001000"), rule).transitions] == [
        "firing",
        "resolved",
    ]


def test_thresholds_and_the_below_direction() -> None:
    above = RuleSpec(condition="threshold", threshold=1.2)
    below = RuleSpec(condition="threshold", threshold=1.2, direction="below")
    assert _kinds("1", above) == ["firing"]
    assert _kinds("1", below) == []
    assert _kinds("0", below) == ["firing"]


def test_a_stopped_source_is_stale_and_one_that_never_ran_is_too() -> None:
    now = T0 + timedelta(hours=5)
    assert stale(last_data_end=T0, now=now, max_age=timedelta(hours=3))
    assert not stale(last_data_end=T0, now=now, max_age=timedelta(hours=6))
    assert stale(last_data_end=None, now=now, max_age=timedelta(hours=6))


@given(st.text(alphabet="01", max_size=80), st.integers(1, 6), st.integers(0, 6))
def test_firings_and_resolves_alternate_and_never_fire_without_a_run_of_for(
    pattern: str, for_periods: int, keep: int
) -> None:
    rule = RuleSpec(
        condition="ratio", ratio=1.2, for_periods=for_periods, keep_firing_for=keep
    )
    outcome = transitions(_hours(pattern), rule)
    edges = [t.kind for t in outcome.transitions if t.kind != "repeat"]
    assert edges == ["firing", "resolved"] * (len(edges) // 2) + (
        ["firing"] if len(edges) % 2 else []
    )
    for t in outcome.transitions:
        if t.kind == "firing":
            i = t.at.hour + 24 * (t.at - T0).days
            assert pattern[i - for_periods + 1 : i + 1] == "1" * for_periods
    if "1" * for_periods not in pattern:
        assert outcome.transitions == ()


@given(
    st.text(alphabet="01", max_size=60),
    st.lists(
        st.tuples(
            st.integers(0, 60),  # where, among the closed periods
            st.one_of(st.none(), st.just(float("nan")), st.floats(0, 1e6)),
            st.one_of(st.none(), st.floats(0, 1e9)),  # any coverage (volume)
            st.sampled_from(["", "traffic", "anomaly", "size"]),
        ),
        max_size=6,
    ),
    st.integers(1, 4),
    st.integers(0, 4),
)
def test_a_period_that_is_not_closed_never_changes_the_state_whatever_it_holds(
    pattern: str,
    open_periods: list[tuple[int, float | None, float | None, str]],
    for_periods: int,
    keep: int,
) -> None:
    rule = RuleSpec(
        condition="ratio", ratio=1.2, for_periods=for_periods, keep_firing_for=keep
    )
    closed = _hours(pattern)
    expected = transitions(closed, rule)
    mixed = list(closed)
    for where, value, volume, flag in sorted(open_periods, key=lambda o: -o[0]):
        at = T0 + timedelta(hours=where, minutes=30)
        mixed.insert(
            min(where, len(mixed)),
            Period(at, value, 1.0, 0.8, 1.2, volume, flag, closed=False),
        )
    outcome = transitions(mixed, rule)
    assert outcome.transitions == expected.transitions
    assert (outcome.state, outcome.since) == (expected.state, expected.since)
    # The open periods never breach: a backtest draws them as partial.
    assert not any(
        b for p, b in zip(mixed, outcome.breaching, strict=True) if not p.closed
    )
