"""Thin Celery tasks of the telemetry area."""

from __future__ import annotations

from celery import shared_task

from costapp.telemetry.services import telemetry_refresh


# No retry: every Prometheus failure (unreachable, 5xx, a refused query) is a
# SourceError that ingest records on the run, so the task itself never raises
# one (the old ``autoretry_for=(ConnectionError,)`` named the built-in, which
# ``requests`` does not raise, and could never fire). The next beat, 15 minutes
# later, re-reads the same hours anyway.
@shared_task
def telemetry_refresh_task() -> int | None:
    """Beat: re-pull the last few hours (see telemetry_refresh)."""
    run = telemetry_refresh()
    return run.pk if run else None
