"""The budget-forecast rule (issue 24): the stored month-end forecast against
each budget in scope, judged from the 5th, once per budget and month."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from analytics.alert_rules import budget_forecast_breach, burn_day
from analytics.errors import InvalidInput
from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.services import channel_upsert
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertState,
    Budget,
    Channel,
    MonthForecastFigure,
)
from costapp.yamlfile import FileProblems

pytestmark = pytest.mark.django_db

NOV = date(2026, 11, 1)


def _at(day: int, month: date = NOV) -> datetime:
    return datetime(month.year, month.month, day, 6, 0, tzinfo=UTC)


@pytest.fixture
def channel() -> Channel:
    return channel_upsert(name="mail", kind="email", config={"to": ["a@b.co"]}).channel


def _rule(channel: Channel, metric: str = "budget_forecast") -> AlertRule:
    rule = AlertRule.objects.create(
        name="t1 over budget",
        metric=metric,
        grain="day",
        scope="team",
        condition="threshold",
        threshold=1.0,
    )
    rule.channels.set([channel])
    return rule


def _forecast(point: float, *, lower: float | None = None, month: date = NOV) -> None:
    """t1's month-end forecast (stored as the recompute writes it)."""
    MonthForecastFigure.objects.update_or_create(
        scope="team",
        name="t1",
        currency="USD",
        month=month,
        defaults={
            "as_of": month + timedelta(days=4),
            "to_date": point / 6,
            "remaining_days": 25,
            "point": point,
            "lower": point * 0.9 if lower is None else lower,
            "upper": point * 1.1,
            "interval": 0.8,
            "method": "ets",
            "path": [
                [(month + timedelta(days=i)).isoformat(), point * (i + 1) / 30]
                for i in range(30)
            ],
            "computed_at": datetime.combine(month, datetime.min.time(), UTC),
        },
    )


@pytest.fixture
def budget() -> Budget:
    return Budget.objects.create(scope="team", name="t1", monthly_amount=Decimal(1000))


def _kinds(events: list[AlertEvent]) -> list[str]:
    return [e.kind for e in events]


def _new_events(since: datetime) -> list[AlertEvent]:
    return list(AlertEvent.objects.filter(created_at=since).order_by("pk"))


def test_it_fires_once_from_the_5th_stays_firing_resolves_and_fires_next_month(
    channel: Channel, budget: Budget
) -> None:
    _rule(channel)
    _forecast(1200.0)
    # Over the budget on the 4th: too early to judge.
    assert alert_rules_evaluate(now=_at(4)) == []
    assert not AlertEvent.objects.exists()
    # The 5th: one page, carrying the forecast, the budget, share and burn date.
    assert len(alert_rules_evaluate(now=_at(5))) == 1
    (event,) = _new_events(_at(5))
    assert (event.scope_name, event.kind) == ("t1", "firing")
    assert (event.value, event.baseline) == (1200.0, 1000.0)
    assert "1,200.00 USD is 120% of the 1,000.00 USD budget" in event.explanation
    assert "(rule: 100%)" in event.explanation
    assert "runs out on 2026-11-25" in event.explanation
    # Still over through the month: no second page, however long.
    for day in (6, 12, 20, 28):
        assert alert_rules_evaluate(now=_at(day)) == []
    assert AlertEvent.objects.count() == 1
    assert AlertState.objects.get().state == "firing"
    # It falls back under the budget: resolved, once.
    _forecast(900.0)
    assert len(alert_rules_evaluate(now=_at(29))) == 1
    assert _kinds(_new_events(_at(29))) == ["resolved"]
    assert alert_rules_evaluate(now=_at(30)) == []
    # Over again next month: a new episode, from the 5th.
    dec = date(2026, 12, 1)
    _forecast(1500.0, month=dec)
    assert alert_rules_evaluate(now=_at(3, dec)) == []
    assert len(alert_rules_evaluate(now=_at(5, dec))) == 1
    assert _kinds(_new_events(_at(5, dec))) == ["firing"]
    assert AlertEvent.objects.get(created_at=_at(5, dec)).value == 1500.0


def test_an_alert_still_firing_when_the_month_turns_ends_with_it(
    channel: Channel, budget: Budget
) -> None:
    _rule(channel)
    _forecast(1200.0)
    alert_rules_evaluate(now=_at(10))
    dec = date(2026, 12, 1)
    alert_rules_evaluate(now=_at(1, dec))
    (event,) = _new_events(_at(1, dec))
    assert event.kind == "resolved" and "the month ended" in event.explanation
    # Over again in December: it fires again from the 5th.
    _forecast(1300.0, month=dec)
    assert alert_rules_evaluate(now=_at(4, dec)) == []
    alert_rules_evaluate(now=_at(5, dec))
    assert _kinds(_new_events(_at(5, dec))) == ["firing"]


def test_the_lower_bound_option_fires_only_when_even_the_cautious_forecast_passes(
    channel: Channel, budget: Budget
) -> None:
    rule = _rule(channel, metric="budget_forecast_lower")
    rule.threshold = 0.9
    rule.save()
    _forecast(1200.0, lower=850.0)  # median over, lower bound under 90 %
    assert alert_rules_evaluate(now=_at(6)) == []
    _forecast(1200.0, lower=950.0)
    alert_rules_evaluate(now=_at(7))
    (event,) = _new_events(_at(7))
    assert (event.kind, event.value, event.baseline) == ("firing", 950.0, 1000.0)
    assert "(80% lower bound) 950.00 USD is 95%" in event.explanation
    assert "(rule: 90%)" in event.explanation


def test_a_budget_without_a_forecast_and_a_scope_name_elsewhere_stay_quiet(
    channel: Channel, budget: Budget
) -> None:
    rule = _rule(channel)
    assert alert_rules_evaluate(now=_at(10)) == []
    _forecast(5000.0)
    rule.scope_name = "t2"
    rule.save()
    assert alert_rules_evaluate(now=_at(11)) == []


def test_the_breach_and_burn_day_are_pure_and_refuse_nonsense() -> None:
    assert budget_forecast_breach(forecast=1000.0, budget=1000.0, share=1.0)
    assert not budget_forecast_breach(forecast=799.0, budget=1000.0, share=0.8)
    with pytest.raises(InvalidInput, match="budget=0"):
        budget_forecast_breach(forecast=1.0, budget=0.0, share=1.0)
    with pytest.raises(InvalidInput, match="share=-1"):
        budget_forecast_breach(forecast=1.0, budget=1.0, share=-1.0)
    assert burn_day([["2026-11-01", 10.0], ["2026-11-02", 20.0]], 15.0) == "2026-11-02"
    assert burn_day([["2026-11-01", 10.0]], 15.0) is None


RULE = """
alerts:
  channels:
    - {{name: oncall, kind: email, to: [oncall@example.com]}}
  rules:
    - name: budget
      metric: {metric}
      grain: day
      scope: team
      condition: threshold
      threshold: {threshold}
      channels: [oncall]
"""


def test_the_fleet_file_accepts_the_budget_forecast_metrics(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    for metric in ("budget_forecast", "budget_forecast_lower"):
        path.write_text(RULE.format(metric=metric, threshold=0.8))
        alert_rules_load(path=path)
        rule = AlertRule.objects.get(name="budget")
        assert (rule.metric, rule.threshold) == (metric, 0.8)


@pytest.mark.parametrize(
    ("threshold", "said"),
    [
        ("0", "threshold: 0: a share of the budget above 0, at most 10"),
        ("-0.5", "threshold: -0.5: a share of the budget above 0"),
        ("80", "threshold: 80: a share of the budget above 0, at most 10"),
        ('"lots"', "threshold: 'lots': a number is required"),
    ],
)
def test_the_fleet_file_refuses_a_bad_share_naming_field_and_value(
    tmp_path: Path, threshold: str, said: str
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(RULE.format(metric="budget_forecast", threshold=threshold))
    with pytest.raises(FileProblems) as refused:
        alert_rules_load(path=path)
    assert said in str(refused.value)
    assert not AlertRule.objects.exists()


def test_the_fleet_file_refuses_a_budget_forecast_by_the_hour(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        RULE.format(metric="budget_forecast", threshold=1).replace(
            "grain: day", "grain: hour"
        )
    )
    with pytest.raises(FileProblems) as refused:
        alert_rules_load(path=path)
    assert "grain: 'hour': budget_forecast is daily" in str(refused.value)
