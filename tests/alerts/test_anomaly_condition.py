"""``condition: anomaly`` and the stored flag: a rise flagged ``anomaly`` (the
band or the sustained detector) breaches, a fall (``saving``, ``check``)
pages only for a rule that asks for ``below``, and a day the sustained
detector holds inside the band never resets ``for``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from analytics.alert_rules import Period, RuleSpec, breach, transitions
from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.forms import AlertRuleForm
from costapp.alerts.validation import rule_problems
from costapp.models import AlertRule
from costapp.yamlfile import FileProblems

DAY0 = datetime(2026, 11, 2, tzinfo=UTC)


def _day(i: int, value: float, flag: str = "") -> Period:
    return Period(
        start=DAY0 + timedelta(days=i), value=value, baseline=1.0, lower=0.8,
        upper=1.25, volume=1e5, flag=flag,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "direction", "expected"),
    [
        ("anomaly", "above", True),
        ("saving", "above", False),
        ("check", "above", False),
        ("traffic", "above", False),
        ("", "above", False),
        ("saving", "below", True),
        ("check", "below", True),
        ("anomaly", "below", False),
    ],
)
def test_an_anomaly_rule_reads_the_stored_flag_in_its_direction(
    flag: str, direction: str, expected: bool
) -> None:
    rule = RuleSpec(condition="anomaly", direction=direction)  # type: ignore[arg-type]
    assert breach(_day(0, 1.1, flag), rule) is expected


def test_an_anomaly_on_a_period_in_progress_is_not_judged() -> None:
    period = Period(start=DAY0, value=2.0, flag="anomaly", closed=False)
    assert not breach(period, RuleSpec(condition="anomaly"))


def test_a_day_the_sustained_detector_holds_inside_the_band_keeps_for_2_pending() -> (
    None
):
    # A +20% step: the second day lands just inside the band (1.2 < 1.25) but
    # the sustained detector holds it, so the band rule fires on that day
    # (the 4th) and resolves after two days back in band (the 7th).
    days = [_day(0, 1.0), _day(1, 1.3, "anomaly"), _day(2, 1.2, "anomaly"),
            _day(3, 1.3, "anomaly"), _day(4, 1.0), _day(5, 1.0)]  # fmt: skip
    for condition in ("band", "ratio", "anomaly"):
        rule = RuleSpec(
            condition=condition,  # type: ignore[arg-type]
            ratio=1.25,
            for_periods=2,
            repeat=timedelta(days=30),
        )
        out = transitions(days, rule)
        assert [(t.kind, t.at.day) for t in out.transitions] == [
            ("firing", 4),
            ("resolved", 7),
        ], condition


def test_without_the_flag_a_day_inside_the_band_resets_for() -> None:
    days = [_day(1, 1.3, "anomaly"), _day(2, 1.2), _day(3, 1.3, "anomaly")]
    out = transitions(days, RuleSpec(condition="band", for_periods=2))
    assert out.transitions == ()


def test_a_fall_never_pages_a_band_rule_above_and_pages_one_below() -> None:
    days = [_day(i, 0.7, "saving") for i in range(3)]
    assert transitions(days, RuleSpec(condition="band")).transitions == ()
    once = timedelta(days=30)
    below = transitions(
        days, RuleSpec(condition="band", direction="below", repeat=once)
    )
    assert [t.kind for t in below.transitions] == ["firing"]


def test_a_rule_on_another_metric_does_not_read_the_flag() -> None:
    rule = RuleSpec(condition="ratio", ratio=1.25, reads_flag=False)
    assert not breach(_day(0, 1.1, "anomaly"), rule)


def test_the_anomaly_condition_is_for_the_metric_that_carries_the_flag() -> None:
    base = {"name": "r", "metric": "cost_per_1k_requests", "grain": "day",
            "condition": "anomaly", "for_periods": 2}  # fmt: skip
    assert rule_problems(base) == []
    refused = rule_problems(base | {"metric": "daily_spend"})
    assert refused and refused[0][0] == "condition"
    assert "'anomaly'" in refused[0][1] and "daily_spend" in refused[0][1]
    unknown = rule_problems(base | {"condition": "cusum"})
    assert unknown == [
        ("condition", "'cusum': band, ratio, threshold, anomaly or price")
    ]


@pytest.mark.django_db
def test_the_rule_form_offers_and_saves_the_anomaly_condition() -> None:
    form = AlertRuleForm(
        data={
            "name": "sustained rise", "metric": "cost_per_1k_requests",
            "grain": "day", "scope": "deployment", "condition": "anomaly",
            "direction": "above", "for_periods": "2", "repeat_minutes": "240",
        }
    )  # fmt: skip
    assert form.is_valid(), form.errors
    rule = form.rule()
    rule.save()
    assert rule.condition == "anomaly" and rule.for_periods == 2


FILE = """
alerts:
  channels:
    - {name: oncall, kind: email, to: [oncall@example.com]}
  rules:
    - {name: sustained, metric: cost_per_1k_requests, grain: day,
       condition: anomaly, for: 2, channels: [oncall]}
    - {name: savings, metric: cost_per_1k_requests, grain: day,
       condition: anomaly, direction: below, channels: [oncall]}
"""


@pytest.mark.django_db
def test_the_fleet_file_loads_anomaly_rules_and_refuses_one_without_a_flag(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FILE)
    alert_rules_load(path=path)
    rules = {
        r.name: (r.condition, r.direction, r.for_periods)
        for r in AlertRule.objects.all()
    }
    assert rules == {
        "sustained": ("anomaly", "above", 2),
        "savings": ("anomaly", "below", 1),
    }
    path.write_text(
        FILE.replace(
            "metric: cost_per_1k_requests, grain: day,\n       condition: anomaly, direction",
            "metric: daily_spend, grain: day,\n       condition: anomaly, direction",
        )
    )
    with pytest.raises(FileProblems) as refused:
        alert_rules_load(path=path)
    assert "'anomaly'" in str(refused.value) and "daily_spend" in str(refused.value)
