"""The beat schedule: the telemetry refresh is aligned to the clock, so the
refresh after an hour closes reads it closed within a minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from costapp.celery import aligned
from costapp.schedule import (
    ALIGN_AFTER_SETTLE_S,
    ENTRIES,
    align_offset_s,
    beat_schedule,
    entry,
    page_bound_s,
)

pytestmark = pytest.mark.smoke

HOUR = datetime(2026, 12, 6, 11, 0, tzinfo=UTC)


def _at(now: datetime) -> aligned:
    return aligned(900, 45, nowfun=lambda: now)


def test_an_aligned_refresh_runs_just_after_each_quarter_whenever_beat_started() -> (
    None
):
    # Beat started at 10:52; the refresh is next due at 11:00:45, not 11:07.
    started = HOUR - timedelta(minutes=8)
    assert _at(HOUR).is_due(started) == (False, 45.0)
    due, then = _at(HOUR + timedelta(seconds=46)).is_due(started)
    assert due and then == pytest.approx(900 - 1)
    # Ran at 11:00:46: next at 11:15:45.
    ran = HOUR + timedelta(seconds=46)
    assert _at(ran + timedelta(minutes=10)).is_due(ran) == (False, 299.0)


def test_the_offset_is_the_settle_delay_and_a_margin(settings: object) -> None:
    refresh = entry("telemetry-refresh")
    assert refresh.aligned
    assert align_offset_s(refresh) == settings.COSTAPP_SETTLE_S + ALIGN_AFTER_SETTLE_S  # type: ignore[attr-defined]


def test_every_entry_expires_before_its_next_run_and_the_bound_follows_the_periods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for e in beat_schedule().values():
        assert float(e["options"]["expires"]) < float(e["schedule"])  # type: ignore[call-overload,arg-type]
    monkeypatch.setenv("COSTAPP_SCHEDULE_TELEMETRY_REFRESH_S", "20")
    monkeypatch.setenv("COSTAPP_SCHEDULE_ALERTS_EVALUATE_S", "20")
    assert page_bound_s() == 60
    assert {e.name for e in ENTRIES} >= {"telemetry-refresh", "pipeline-reap"}
