"""Two worker processes released by a barrier on PostgreSQL, 20 times:
exactly one outbox row and one delivery each time."""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from costapp.alerts.delivery import deliveries_reap, delivery_send
from costapp.alerts.evaluation import alert_rules_evaluate
from costapp.alerts.services import channel_upsert
from costapp.models import (
    AlertEvent,
    AlertRule,
    AlertRuleEvaluated,
    AlertState,
    Delivery,
    UnitCostFigure,
)
from tests.alerts.conftest import NOW
from tests.support.receiver import receiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _worker(barrier: Any, results: Any) -> None:
    connections.close_all()  # a fresh connection of this process's own
    barrier.wait()
    ids = alert_rules_evaluate(now=NOW)
    sent = [pk for pk in ids if delivery_send(delivery_id=pk) is not None]
    # The other worker's ids too: a claimed row is never sent twice.
    for pk in Delivery.objects.filter(status="pending").values_list("pk", flat=True):
        if delivery_send(delivery_id=pk) is not None:
            sent.append(pk)
    results.put((ids, sent))
    connections.close_all()


def _seed() -> None:
    """Three closed hours in breach, computed after the last one closed."""
    UnitCostFigure.objects.bulk_create(
        UnitCostFigure(
            scope="deployment",
            name="chat",
            grain="hour",
            period_start=NOW - timedelta(hours=4 - i),
            clock="provisional",
            cost_per_1k_requests=0.5,
            baseline=0.3,
            requests=1000,
            computed_at=NOW - timedelta(minutes=30),
        )
        for i in range(3)
    )


def _rule(channel: Any) -> AlertRule:
    rule = AlertRule.objects.create(
        name="r",
        metric="cost_per_1k_requests",
        grain="hour",
        condition="ratio",
        ratio=1.2,
        for_periods=1,
    )
    rule.channels.set([channel])
    # Made before the figures: they are news to it.
    AlertRule.objects.filter(pk=rule.pk).update(created_at=NOW - timedelta(days=1))
    return rule


def test_two_workers_at_a_barrier_send_one_notification_each_time(
    postgres_only: None, settings: Any
) -> None:
    settings.COSTAPP_OUTBOUND_TEST_LOOPBACK = True
    _seed()
    ctx = multiprocessing.get_context("fork")
    with receiver() as rx:
        channel = channel_upsert(name="hook", kind="webhook", config={"url": rx.url})
        rule = _rule(channel.channel)
        for round_ in range(20):
            AlertEvent.objects.all().delete()
            AlertState.objects.all().delete()
            AlertRuleEvaluated.objects.all().delete()
            Delivery.objects.all().delete()
            # The steady state: the row exists, both workers read version 0,
            # and only the conditional UPDATE keeps the second one out.
            AlertState.objects.create(rule=rule, scope_name="chat")
            before = len(rx.received)
            connections.close_all()
            barrier, results = ctx.Barrier(2), ctx.Queue()
            workers = [
                ctx.Process(target=_worker, args=(barrier, results)) for _ in "ab"
            ]
            for w in workers:
                w.start()
            outs = [results.get(timeout=60) for _ in workers]
            for w in workers:
                w.join(30)
                assert w.exitcode == 0
            assert sorted(len(ids) for ids, _ in outs) == [0, 1], round_
            assert sum(len(sent) for _, sent in outs) == 1, round_
            assert Delivery.objects.count() == 1
            assert AlertEvent.objects.count() == 1
            assert len(rx.received) - before == 1


def test_a_worker_killed_after_sending_resends_with_the_same_webhook_id(
    settings: Any,
) -> None:
    settings.COSTAPP_OUTBOUND_TEST_LOOPBACK = True
    _seed()
    with receiver() as rx:
        channel = channel_upsert(name="hook", kind="webhook", config={"url": rx.url})
        _rule(channel.channel)
        (pk,) = alert_rules_evaluate(now=NOW)
        assert delivery_send(delivery_id=pk) is not None
        # As if the worker died after the send, before recording it:
        Delivery.objects.filter(pk=pk).update(status="sending", attempted_at=NOW)
        assert deliveries_reap(now=NOW + timedelta(minutes=10)) == [pk]
        # A row waiting out its backoff is not hurried by the reaper.
        Delivery.objects.filter(pk=pk).update(attempted_at=NOW + timedelta(minutes=9))
        assert deliveries_reap(now=NOW + timedelta(minutes=30)) == []
        outcome = delivery_send(delivery_id=pk)
    assert outcome is not None and outcome.status == "sent"
    first, second = rx.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert Delivery.objects.get(pk=pk).attempts == 2
