"""A write that commits while a day is being rolled up drops the fresh mark:
the rollup writer and the triggers share the (deployment, day) lock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, connections

from costapp.fleet.demo_setup import demo_fleet_load
from costapp.models import Deployment, DeploymentHour, TelemetryRollupDay
from costapp.telemetry import rollups

pytestmark = [pytest.mark.integration]

DAY = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_a_write_during_a_rollup_waits_and_then_drops_the_new_mark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time")
    demo_fleet_load(end=DAY + timedelta(days=1))
    dep = Deployment.objects.order_by("name").first()
    assert dep is not None
    DeploymentHour.objects.create(deployment=dep, hour=DAY, requests_stop=10.0)
    read_done = threading.Event()
    real_read = rollups.raw_read

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        out = real_read(*args, **kwargs)
        read_done.set()
        time.sleep(1.0)  # the write below starts while the day is rolled up
        return out

    monkeypatch.setattr(rollups, "raw_read", slow_read)
    wrote_at: list[float] = []

    def write() -> None:
        try:
            read_done.wait(10)
            DeploymentHour.objects.filter(deployment=dep, hour=DAY).update(
                requests_stop=20.0
            )
            wrote_at.append(time.monotonic())
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    rollups.rollups_store(deployment_id=dep.pk, days=[DAY.date()])
    stored_at = time.monotonic()
    writer.join(10)
    assert wrote_at, "the write never finished"
    # The write waited for the rollup's transaction, then dropped its mark.
    assert wrote_at[0] >= stored_at - 0.05
    assert not TelemetryRollupDay.objects.filter(
        deployment=dep, day=DAY.date()
    ).exists()
    # Rolled up again, the day is vouched for with the written value.
    monkeypatch.setattr(rollups, "raw_read", real_read)
    assert rollups.rollups_store(deployment_id=dep.pk, days=[DAY.date()]) == 1
    assert TelemetryRollupDay.objects.filter(deployment=dep, day=DAY.date()).exists()
