"""Thin Celery tasks of the telemetry area."""

from __future__ import annotations

from celery import shared_task

from costapp.telemetry.services import telemetry_refresh


@shared_task(
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    retry_jitter=True,
    max_retries=3,
)
def telemetry_refresh_task() -> int | None:
    """Beat: re-pull the last few hours (see telemetry_refresh)."""
    run = telemetry_refresh()
    return run.pk if run else None
