"""Telemetry writes: create a backfill run, execute one, refresh the last hours.

Services return runs and never queue: the callers (the telemetry page) queue
them with ``costapp.tasks.ingest_runs_queue`` once the service returns.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from costapp.ingest import ingest_run_create, ingest_run_execute
from costapp.models import Deployment, IngestRun
from costapp.sources.base import Window

logger = logging.getLogger(__name__)

SOURCE = "prometheus"
# Options a caller may pass through to the adapter (costapp.sources.prometheus.Options).
OPTION_KEYS = {
    "scrape_interval_s",
    "slice_hours",
    "chunk_s",
    "baseline_lookback_s",
    "born_lookback_s",
    "fleet_dcgm_selector",
}


class TelemetryInputError(ValueError):
    pass


def _check_deployments(names: list[str]) -> list[Deployment]:
    found = {d.name: d for d in Deployment.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise TelemetryInputError(f"deployment: {', '.join(unknown)} not in the fleet")
    no_selector = [n for n in names if not found[n].prometheus_selector.strip()]
    if no_selector:
        raise TelemetryInputError(
            "deployment: no Prometheus selector set for " + ", ".join(no_selector)
        )
    return [found[n] for n in names]


def telemetry_run_create(
    *,
    deployments: list[str],
    start: datetime,
    end: datetime,
    dcgm_selectors: dict[str, str] | None = None,
    options: dict[str, Any] | None = None,
) -> IngestRun:
    if not deployments:
        raise TelemetryInputError("deployment: choose at least one")
    _check_deployments(deployments)
    try:
        window = Window(start, end)
    except ValueError as exc:
        raise TelemetryInputError(f"window: {exc}") from exc
    params: dict[str, Any] = {"deployments": list(deployments)}
    # Only this run's overrides are stored: without one, the adapter reads
    # each deployment's own dcgm_selector when the run executes.
    selectors = {k: v.strip() for k, v in (dcgm_selectors or {}).items() if v.strip()}
    if selectors:
        params["dcgm_selectors"] = selectors
    for key, value in (options or {}).items():
        if key not in OPTION_KEYS:
            raise TelemetryInputError(f"{key}: not a telemetry option")
        if value not in (None, ""):
            params[key] = value
    return ingest_run_create(
        source=SOURCE, window=window, target=",".join(deployments), params=params
    )


def telemetry_run_execute(*, run: IngestRun) -> IngestRun:
    """Run synchronously (command line, refresh task)."""
    from costapp.sources.base import SourceError
    from costapp.sources.registry import source_for_run

    try:
        source = source_for_run(run)
    except SourceError as exc:
        IngestRun.objects.filter(pk=run.pk).update(
            status=IngestRun.FAILED, error=str(exc), finished_at=timezone.now()
        )
        run.refresh_from_db()
        return run
    return ingest_run_execute(run=run, source=source)


def telemetry_refresh(
    *, now: datetime | None = None, hours: int | None = None
) -> IngestRun | None:
    """Re-pull the last few hours of every deployment with a selector.

    The current hour is incomplete and the previous one may still receive late
    samples (remote write, federation), so each refresh rewrites them.
    """
    if not settings.PROMETHEUS_URL:
        return None
    names = list(
        Deployment.objects.exclude(prometheus_selector="").values_list(
            "name", flat=True
        )
    )
    if not names:
        return None
    now = now or timezone.now()
    hours = hours or settings.TELEMETRY_REFRESH_HOURS
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    run = telemetry_run_create(
        deployments=names, start=end - timedelta(hours=hours), end=end
    )
    return telemetry_run_execute(run=run)
