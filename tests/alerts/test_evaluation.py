from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.services import channel_upsert
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertState,
    Channel,
    CostLine,
    Delivery,
    Deployment,
    DeploymentHour,
    IngestRun,
    Silence,
    UnitCostFigure,
)
from tests.alerts.conftest import NOW

pytestmark = pytest.mark.django_db

# The hour ending at NOW is closed a settle delay (two scrape intervals) later.
CLOSED = NOW + timedelta(minutes=1)


def _figures(name: str, end: datetime, pattern: str) -> None:
    """One hourly figure per character ending at ``end``: '1' is 1.5 x the
    baseline, '0' at it."""
    start = end - timedelta(hours=len(pattern))
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name=name,
            grain="hour",
            period_start=start + timedelta(hours=i),
            clock="provisional",
            cost_per_1k_requests=0.45 if c == "1" else 0.30,
            baseline=0.30,
            lower=0.25,
            upper=0.35,
            requests=5000,
            flag="anomaly" if c == "1" else "",
            cause="replicas 6 → 9 at unchanged traffic" if c == "1" else "",
            computed_at=end,
        )
        for i, c in enumerate(pattern)
    )


@pytest.fixture
def channel() -> Channel:
    return channel_upsert(name="mail", kind="email", config={"to": ["a@b.co"]}).channel


def _created(rule: AlertRule, at: datetime) -> AlertRule:
    AlertRule.objects.filter(pk=rule.pk).update(created_at=at)
    rule.refresh_from_db()
    return rule


@pytest.fixture
def fleet_rule(channel: Channel) -> AlertRule:
    rule = AlertRule.objects.create(
        name="unit cost",
        metric="cost_per_1k_requests",
        grain="hour",
        scope="deployment",
        condition="ratio",
        ratio=1.2,
        for_periods=3,
    )
    rule.channels.set([channel])
    # Made a month before the figures: what they show is news to it.
    return _created(rule, NOW - timedelta(days=30))


def test_figures_that_stood_before_the_rule_existed_are_history_and_page_nobody(
    fleet_rule: AlertRule,
) -> None:
    # An incident ten days ago, quiet since, all stored before the rule.
    _figures("chat", NOW, "0" * 24 + "1" * 6 + "0" * 240)
    _created(fleet_rule, CLOSED)
    assert alert_rules_evaluate(now=CLOSED) == []
    kinds = list(
        AlertEvent.objects.order_by("data_time").values_list("kind", "not_sent")
    )
    assert kinds == [("firing", "historical"), ("resolved", "historical")]
    (row,) = Delivery.objects.all()
    assert (row.status, row.reason) == ("not_sent", "historical")


def test_a_history_firing_restated_away_resolves_without_telling_anyone(
    fleet_rule: AlertRule,
) -> None:
    """Seen in the live loop: four "resolved" pages for alerts whose firing
    was history and never sent. A resolution goes where the firing went."""
    _figures("chat", NOW, "0" * 10 + "111")
    _created(fleet_rule, CLOSED)
    assert alert_rules_evaluate(now=CLOSED) == []  # firing, history
    UnitCostFigure.objects.update(
        cost_per_1k_requests=0.30, flag="", cause="",
        known_since=CLOSED + timedelta(minutes=30),
    )  # fmt: skip
    assert alert_rules_evaluate(now=CLOSED + timedelta(hours=1)) == []
    resolved = AlertEvent.objects.get(kind="resolved")
    assert (resolved.reason, resolved.not_sent) == ("restated", "firing not sent")


def test_a_backfill_after_the_rule_pages_once_and_says_how_late_it_is(
    fleet_rule: AlertRule,
) -> None:
    # The same incident, backfilled now: nobody was told, so it is news.
    _figures("chat", NOW, "0" * 24 + "1" * 6 + "0" * 240)
    (pk,) = alert_rules_evaluate(now=CLOSED)
    events = list(Delivery.objects.get(pk=pk).events.order_by("data_time"))
    assert [(e.kind, e.not_sent) for e in events] == [("firing", ""), ("resolved", "")]
    fired = events[0]
    closed_at = fired.data_time + timedelta(hours=1, seconds=30)
    assert fired.late_s == pytest.approx((CLOSED - closed_at).total_seconds())
    assert fired.late_s > 9 * 86400
    # Evaluated again, the same figures are history: nothing more.
    assert alert_rules_evaluate(now=CLOSED + timedelta(minutes=5)) == []


def test_a_live_incident_sends_once_with_the_explanation(fleet_rule: AlertRule) -> None:
    _figures("chat", NOW, "0" * 48 + "111")
    (pk,) = alert_rules_evaluate(now=CLOSED)
    delivery = Delivery.objects.get(pk=pk)
    (event,) = delivery.events.all()
    assert (event.kind, event.scope_name, event.not_sent) == ("firing", "chat", "")
    assert event.explanation == "replicas 6 → 9 at unchanged traffic"
    assert event.figure_id is not None
    assert event.late_s is None  # a minute after the hour closed: on time
    assert alert_rules_evaluate(now=CLOSED + timedelta(minutes=15)) == []


def test_the_hour_in_progress_is_not_judged_until_it_closes(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 48 + "111")
    # At NOW the third breaching hour has ended but is not settled: pending.
    assert alert_rules_evaluate(now=NOW) == []
    assert AlertEvent.objects.count() == 0
    (pk,) = alert_rules_evaluate(now=CLOSED)
    assert Delivery.objects.get(pk=pk).events.get().kind == "firing"


def test_an_incomplete_figure_neither_resolves_nor_resets(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 48 + "111")
    alert_rules_evaluate(now=CLOSED)
    # Three hours in band, the last read a quarter of the way in (a quarter
    # of the traffic, classed as a drop): partial, so it is not the third
    # clear period the resolve needs.
    later = NOW + timedelta(hours=3)
    _figures("chat", later, "000")
    UnitCostFigure.objects.filter(period_start=later - timedelta(hours=1)).update(
        complete=False
    )
    assert alert_rules_evaluate(now=later + timedelta(minutes=1)) == []
    assert AlertState.objects.get(scope_name="chat").state == "firing"
    UnitCostFigure.objects.filter(period_start=later - timedelta(hours=1)).update(
        complete=True, known_since=later + timedelta(minutes=15)
    )
    (pk,) = alert_rules_evaluate(now=later + timedelta(minutes=16))
    assert Delivery.objects.get(pk=pk).events.get().kind == "resolved"


def test_late_data_that_moves_a_firing_alert_does_not_page_it_again(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 48 + "111")
    alert_rules_evaluate(now=CLOSED)
    # Late samples: the first breaching hour was in band after all, and the
    # hour after the third breaches: the alert fires from an hour later.
    first = NOW - timedelta(hours=3)
    UnitCostFigure.objects.filter(period_start=first).update(
        cost_per_1k_requests=0.30, flag="", known_since=CLOSED + timedelta(hours=1)
    )
    _figures("chat", NOW + timedelta(hours=1), "1")
    assert alert_rules_evaluate(now=CLOSED + timedelta(hours=1)) == []
    assert AlertEvent.objects.filter(kind="firing").count() == 1


def test_replay_sends_history(fleet_rule: AlertRule) -> None:
    _figures("chat", NOW, "0" * 24 + "1" * 6 + "0" * 240)
    _created(fleet_rule, CLOSED)
    (pk,) = alert_rules_evaluate(now=CLOSED, replay=True)
    assert Delivery.objects.get(pk=pk).events.count() == 2


def test_transitions_of_one_evaluation_are_grouped_per_channel(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 10 + "111")
    _figures("embed", NOW, "0" * 10 + "111")
    (pk,) = alert_rules_evaluate(now=CLOSED)
    names = sorted(
        Delivery.objects.get(pk=pk).events.values_list("scope_name", flat=True)
    )
    assert names == ["chat", "embed"]


def test_a_restatement_that_removes_the_breach_resolves_with_reason_restated(
    fleet_rule: AlertRule,
) -> None:
    _figures("chat", NOW, "0" * 10 + "111")
    alert_rules_evaluate(now=CLOSED)
    UnitCostFigure.objects.update(
        cost_per_1k_requests=0.30,
        flag="",
        cause="",
        known_since=CLOSED + timedelta(minutes=30),
    )
    (pk,) = alert_rules_evaluate(now=CLOSED + timedelta(hours=1))
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.kind, event.reason) == ("resolved", "restated")


def test_a_restatement_resolves_at_the_last_closed_hour_not_the_one_in_progress(
    fleet_rule: AlertRule,
) -> None:
    """Seen in the live loop: an earlier hour restated (the backfill rewrote
    it) resolved the alert dated at the hour still in progress, and when that
    hour closed regressed, its firing was passed over as already judged."""
    AlertRule.objects.filter(pk=fleet_rule.pk).update(for_periods=1)
    _figures("chat", NOW, "0" * 10 + "1")
    alert_rules_evaluate(now=CLOSED)
    earlier = UnitCostFigure.objects.get(period_start=NOW - timedelta(hours=1))
    UnitCostFigure.objects.filter(pk=earlier.pk).update(
        cost_per_1k_requests=0.30, flag="", cause=""
    )
    _figures("chat", NOW + timedelta(hours=1), "1")  # in progress at NOW + 30 min
    alert_rules_evaluate(now=CLOSED + timedelta(minutes=30))
    resolved = AlertEvent.objects.get(kind="resolved")
    assert (resolved.reason, resolved.data_time) == ("restated", earlier.period_start)

    alert_rules_evaluate(now=CLOSED + timedelta(hours=1))
    firing = AlertEvent.objects.filter(kind="firing").order_by("data_time")
    assert [e.data_time for e in firing] == [NOW - timedelta(hours=1), NOW]
    assert firing.last().not_sent == ""


def test_a_firing_period_reopened_by_late_data_holds_the_alert_until_judged_again(
    fleet_rule: AlertRule,
) -> None:
    """Seen in the live loop: yesterday's bill paged, then late telemetry made
    the day incomplete for a minute; that was sent as "resolved, restated",
    and when the day closed again breaching, nothing fired."""
    AlertRule.objects.filter(pk=fleet_rule.pk).update(for_periods=1)
    _figures("chat", NOW, "0" * 10 + "1")
    alert_rules_evaluate(now=CLOSED)
    last = UnitCostFigure.objects.filter(period_start=NOW - timedelta(hours=1))
    last.update(complete=False)
    assert alert_rules_evaluate(now=CLOSED + timedelta(minutes=5)) == []
    last.update(complete=True, cost_per_1k_requests=0.50)
    assert alert_rules_evaluate(now=CLOSED + timedelta(minutes=10)) == []
    assert list(AlertEvent.objects.values_list("kind", flat=True)) == ["firing"]
    assert AlertState.objects.get(scope_name="chat").state == "firing"
    # Reopened and then restated below the rule: resolved, as restated.
    last.update(complete=False)
    alert_rules_evaluate(now=CLOSED + timedelta(minutes=15))
    last.update(complete=True, cost_per_1k_requests=0.30, flag="", cause="")
    alert_rules_evaluate(now=CLOSED + timedelta(minutes=20))
    resolved = AlertEvent.objects.get(kind="resolved")
    assert (resolved.reason, resolved.data_time) == (
        "restated",
        NOW - timedelta(hours=1),
    )
    # Restated back into breach (the bill corrected again): it fires anew.
    last.update(cost_per_1k_requests=0.50, flag="anomaly")
    alert_rules_evaluate(now=CLOSED + timedelta(minutes=25))
    kinds = AlertEvent.objects.order_by("created_at", "pk").values_list(
        "kind", "data_time"
    )
    assert list(kinds)[-1] == ("firing", NOW - timedelta(hours=1))


def test_a_silenced_deployment_is_recorded_but_not_sent(
    fleet_rule: AlertRule,
) -> None:
    Silence.objects.create(
        scope="deployment",
        name="chat",
        starts_at=NOW - timedelta(hours=1),
        ends_at=NOW + timedelta(hours=1),
    )
    _figures("chat", NOW, "0" * 10 + "111")
    assert alert_rules_evaluate(now=CLOSED) == []
    assert AlertEvent.objects.get().not_sent == "silenced"


def test_a_silenced_firing_resolves_quietly_unless_a_repeat_told_someone(
    fleet_rule: AlertRule,
) -> None:
    AlertRule.objects.filter(pk=fleet_rule.pk).update(repeat_minutes=60, for_periods=1)
    silence = Silence.objects.create(
        scope="deployment", name="chat",
        starts_at=NOW - timedelta(hours=1), ends_at=NOW + timedelta(minutes=30),
    )  # fmt: skip
    _figures("chat", NOW, "0" * 10 + "111")
    assert alert_rules_evaluate(now=CLOSED) == []  # firing, silenced
    UnitCostFigure.objects.all().delete()
    _figures("chat", NOW + timedelta(hours=1), "0" * 10 + "1110")
    assert alert_rules_evaluate(now=CLOSED + timedelta(hours=1)) == []
    resolved = AlertEvent.objects.get(kind="resolved")
    assert resolved.not_sent == "firing not sent"
    # Again, the silence over before the first repeat: the repeat is sent,
    # so is the resolution.
    AlertEvent.objects.all().delete()
    AlertState.objects.all().delete()
    UnitCostFigure.objects.all().delete()
    silence.delete()
    Silence.objects.create(
        scope="deployment", name="chat",
        starts_at=NOW - timedelta(hours=1), ends_at=NOW + timedelta(minutes=30),
    )  # fmt: skip
    _figures("chat", NOW, "0" * 10 + "111")
    alert_rules_evaluate(now=CLOSED)
    UnitCostFigure.objects.all().delete()
    _figures("chat", NOW + timedelta(hours=2), "0" * 10 + "11111")
    alert_rules_evaluate(now=CLOSED + timedelta(hours=2))
    assert AlertEvent.objects.filter(kind="repeat", not_sent="").exists()
    UnitCostFigure.objects.all().delete()
    _figures("chat", NOW + timedelta(hours=3), "0" * 10 + "111110")
    alert_rules_evaluate(now=CLOSED + timedelta(hours=3))
    assert AlertEvent.objects.get(kind="resolved").not_sent == ""


def test_the_hourly_cap_holds_further_notifications(
    fleet_rule: AlertRule, channel: Channel
) -> None:
    channel.hourly_cap = 1
    channel.save()
    _figures("chat", NOW, "0" * 10 + "111")
    assert len(alert_rules_evaluate(now=CLOSED)) == 1
    _figures("embed", NOW + timedelta(minutes=30), "0" * 10 + "111")
    assert alert_rules_evaluate(now=CLOSED + timedelta(minutes=30)) == []
    assert Delivery.objects.filter(reason="hourly cap").count() == 1


def _hour_up_to(name: str, last_sample: datetime) -> None:
    deployment = Deployment.objects.get(name=name)
    hour = last_sample.replace(minute=0, second=0)
    DeploymentHour.objects.create(
        deployment=deployment, hour=hour, requests_stop=10, last_sample_at=last_sample
    )


def test_a_deployment_whose_samples_stop_fires_staleness_once_on_its_newest_sample(
    channel: Channel,
) -> None:
    rule = AlertRule.objects.create(
        name="stale",
        metric="staleness",
        grain="hour",
        condition="threshold",
        threshold=0.25,
    )
    rule.channels.set([channel])
    for name in ("chat", "embed", "rag"):
        Deployment.objects.create(
            name=name, model_name="m", gpu_type="H100", prometheus_selector='job="x"'
        )
    _hour_up_to("chat", NOW - timedelta(minutes=20))  # stopped 20 minutes ago
    _hour_up_to("embed", NOW - timedelta(seconds=15))
    # rag has a selector and never delivered a sample: stale too.
    (pk,) = alert_rules_evaluate(now=NOW)
    events = sorted(
        Delivery.objects.get(pk=pk).events.all(), key=lambda e: e.scope_name
    )
    assert [(e.scope_name, e.kind, e.reason) for e in events] == [
        ("chat", "firing", "stale"),
        ("rag", "firing", "stale"),
    ]
    assert events[0].value == pytest.approx(20 / 60)
    assert events[1].value is None
    # Still stale: no second page.
    assert alert_rules_evaluate(now=NOW + timedelta(minutes=10)) == []
    _hour_up_to("chat", NOW + timedelta(minutes=14))
    (pk,) = alert_rules_evaluate(now=NOW + timedelta(minutes=14, seconds=30))
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.scope_name, event.kind) == ("chat", "resolved")


def test_an_account_without_a_new_bill_day_fires_bill_staleness(
    channel: Channel, settings: Any
) -> None:
    from decimal import Decimal

    settings.COST_EXPLORER_ACCOUNTS = ["111111111111", "222222222222"]
    rule = AlertRule.objects.create(
        name="bills late",
        metric="bill_staleness",
        grain="day",
        scope="fleet",
        condition="threshold",
        threshold=48,
    )
    rule.channels.set([channel])
    midnight = NOW.replace(hour=0)
    for account, days_ago in (("111111111111", 1), ("222222222222", 4)):
        CostLine.objects.create(
            source="cost_explorer",
            account_id=account,
            period_start=midnight - timedelta(days=days_ago),
            service="Amazon Elastic Compute Cloud - Compute",
            unblended_cost=Decimal("1.0"),
            fetched_at=NOW,
        )
    (pk,) = alert_rules_evaluate(now=NOW)
    (event,) = Delivery.objects.get(pk=pk).events.all()
    # The 4 days ago bill ends 3 days ago at midnight, 84 hours before NOW.
    assert (event.scope_name, event.kind) == ("222222222222", "firing")
    assert event.value == pytest.approx(3 * 24 + 12)


def test_a_per_1m_token_ratio_rule_reads_the_stored_token_baseline(
    channel: Channel,
) -> None:
    rule = AlertRule.objects.create(
        name="tokens",
        metric="cost_per_1m_tokens",
        grain="hour",
        condition="ratio",
        ratio=1.2,
        for_periods=2,
    )
    rule.channels.set([channel])
    _created(rule, NOW - timedelta(days=1))
    _figures("chat", NOW, "0" * 5 + "11")
    UnitCostFigure.objects.update(cost_per_1m_tokens=2.0, baseline_per_1m_tokens=1.0)
    UnitCostFigure.objects.filter(period_start__lt=NOW - timedelta(hours=2)).update(
        cost_per_1m_tokens=1.0
    )
    (pk,) = alert_rules_evaluate(now=CLOSED)
    (event,) = Delivery.objects.get(pk=pk).events.all()
    assert (event.kind, event.value, event.baseline) == ("firing", 2.0, 1.0)


def test_the_pipeline_after_an_ingest_runs_the_evaluation(
    fleet_rule: AlertRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time_machine

    from costapp.pipeline import work
    from costapp.pipeline.runner import pipeline_drain
    from costapp.pipeline.runs import run_followups

    class Result:
        rows_written = 0

    # The figures are given; the steps before the evaluation do nothing.
    monkeypatch.setattr(work, "unit_costs_recompute", lambda **kwargs: Result())
    monkeypatch.setattr(work, "idle_figures_recompute", lambda **kwargs: Result())
    _figures("chat", NOW, "0" * 10 + "111")
    run = IngestRun.objects.create(
        source="demo",
        window_start=NOW - timedelta(hours=1),
        window_end=NOW,
        status=IngestRun.SUCCEEDED,
    )
    with time_machine.travel(CLOSED, tick=False):
        done = [e.step for e in pipeline_drain(run_followups(run)) if e.ran]
    assert done == [
        "rollups",
        "cost_shares",
        "unit_costs",
        "idle",
        "forecasts",
        "alerts",
        "pages",
    ]
    assert AlertEvent.objects.get().kind == "firing"


def test_90_days_of_daily_figures_stored_before_the_rule_page_nobody(
    channel: Channel,
) -> None:
    rule = AlertRule.objects.create(
        name="daily", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    rule.channels.set([channel])
    midnight = NOW.replace(hour=0)
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name=name,
            grain="day",
            period_start=midnight - timedelta(days=90 - i),
            clock="final",
            # an incident every fortnight, none in the last week
            cost_per_1k_requests=0.6 if i % 14 == 3 and i < 80 else 0.3,
            baseline=0.3,
            requests=10_000,
            computed_at=NOW,
        )
        for name in ("chat", "embed")
        for i in range(90)
    )
    assert alert_rules_evaluate(now=NOW) == []
    events = AlertEvent.objects.all()
    assert events.count() == 2 * 2 * 6  # 6 incidents x fire + resolve x 2 series
    assert set(events.values_list("not_sent", flat=True)) == {"historical"}
    assert alert_rules_evaluate(now=NOW + timedelta(hours=1)) == []


def test_an_acknowledged_alert_holds_its_repeats_and_still_resolves(
    fleet_rule: AlertRule, client: Any
) -> None:
    """Acknowledge on the rule page (a tech lead): the repeats that follow
    are recorded as "acknowledged" and not sent; the resolution is sent and
    ends the acknowledgement, so the next firing pages again."""
    from django.contrib.auth.models import Permission, User

    AlertRule.objects.filter(pk=fleet_rule.pk).update(repeat_minutes=60)
    _figures("chat", NOW, "0" * 10 + "111")
    assert len(alert_rules_evaluate(now=CLOSED)) == 1  # firing, sent
    lead = User.objects.create_user("lead")
    lead.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_alertrule", "change_alertrule", "add_silence"]
        )
    )
    client.force_login(lead)
    url = f"/alerts/rules/{fleet_rule.pk}/"
    page = client.post(url, {"action": "acknowledge", "scope_name": "chat"})
    assert page.status_code == 302
    state = AlertState.objects.get(rule=fleet_rule, scope_name="chat")
    assert state.acknowledged_by == "lead" and state.acknowledged_at is not None
    assert "repeats held until it resolves" in client.get(url).content.decode()
    # Three more hours over the band: repeats, held.
    UnitCostFigure.objects.all().delete()
    _figures("chat", NOW + timedelta(hours=3), "0" * 10 + "111111")
    assert alert_rules_evaluate(now=CLOSED + timedelta(hours=3)) == []
    held = AlertEvent.objects.filter(kind="repeat")
    assert held.exists() and {e.not_sent for e in held} == {"acknowledged"}
    # Back at the baseline: the resolution is sent, the acknowledgement ends.
    UnitCostFigure.objects.all().delete()
    _figures("chat", NOW + timedelta(hours=6), "0" * 10 + "111111" + "000")
    (pk,) = alert_rules_evaluate(now=CLOSED + timedelta(hours=6))
    assert [e.kind for e in Delivery.objects.get(pk=pk).events.all()] == ["resolved"]
    state.refresh_from_db()
    assert (state.state, state.acknowledged_at, state.acknowledged_by) == (
        "inactive",
        None,
        "",
    )


def test_acknowledging_what_is_not_active_says_so_and_needs_the_right(
    fleet_rule: AlertRule, client: Any
) -> None:
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer")
    viewer.user_permissions.set(
        Permission.objects.filter(codename__in=["view_alertrule", "change_alertrule"])
    )
    client.force_login(viewer)
    url = f"/alerts/rules/{fleet_rule.pk}/"
    assert (
        client.post(url, {"action": "acknowledge", "scope_name": "chat"}).status_code
        == 403
    )
    viewer.user_permissions.add(Permission.objects.get(codename="add_silence"))
    viewer = User.objects.get(pk=viewer.pk)  # permissions are cached per object
    client.force_login(viewer)
    page = client.post(
        url, {"action": "acknowledge", "scope_name": "nope"}, follow=True
    )
    assert "scope_name=&#x27;nope&#x27;: not an active alert" in page.content.decode()
