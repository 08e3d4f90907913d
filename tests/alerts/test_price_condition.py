"""``condition: price``: the one day a known price change is told
(analytics.price_events) breaches a rule in its direction, read from the
stored figure's price part; no other condition breaches on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from analytics.alert_rules import Period, RuleSpec, breach, transitions
from costapp.alerts.evaluation import rule_series
from costapp.models import AlertRule, UnitCostFigure

DAY0 = datetime(2026, 11, 2, tzinfo=UTC)


def _day(i: int, flag: str = "", part: float | None = None) -> Period:
    return Period(
        start=DAY0 + timedelta(days=i), value=1.0, baseline=1.0, lower=0.8,
        upper=1.25, volume=1e5, flag=flag, price_part=part,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("part", "direction", "expected"),
    [(0.2, "above", True), (0.2, "below", False), (-0.2, "below", True),
     (-0.2, "above", False), (None, "above", True)],
)  # fmt: skip
def test_a_price_rule_reads_the_direction_of_the_change(
    part: float | None, direction: str, expected: bool
) -> None:
    rule = RuleSpec(condition="price", direction=direction)  # type: ignore[arg-type]
    assert breach(_day(0, "price", part), rule) is expected


def test_a_price_day_pages_a_price_rule_once_and_no_other() -> None:
    days = [_day(0), _day(1, "price", 0.3), _day(2), _day(3)]
    once = timedelta(days=30)
    out = transitions(days, RuleSpec(condition="price", repeat=once))
    assert [(t.kind, t.at.day) for t in out.transitions] == [
        ("firing", 3),
        ("resolved", 4),
    ]
    for condition in ("band", "ratio", "anomaly"):
        rule = RuleSpec(condition=condition, ratio=1.2)  # type: ignore[arg-type]
        assert transitions(days, rule).transitions == ()


@pytest.mark.django_db
def test_the_stored_price_part_reaches_the_rule() -> None:
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name="chat",
            grain="day",
            period_start=DAY0 + timedelta(days=i),
            clock="final",
            cost_per_1k_requests=1.0,
            baseline=1.0,
            lower=0.8,
            upper=1.25,
            requests=5000,
            flag="price" if i == 1 else "",
            parts={"price": 0.25} if i == 1 else {},
            computed_at=DAY0,
        )
        for i in range(3)
    )
    rule = AlertRule.objects.create(
        name="expiry", metric="cost_per_1k_requests", grain="day",
        scope="deployment", condition="price", direction="above",
    )  # fmt: skip
    (series,) = rule_series(
        rule, start=DAY0, end=DAY0 + timedelta(days=3), now=DAY0 + timedelta(days=5)
    )
    parts = [p.price_part for p in series.periods]
    assert parts == [None, 0.25, None]
