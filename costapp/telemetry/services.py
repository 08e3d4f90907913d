"""Telemetry writes: create a backfill run, execute one, refresh the last hours.

Services return runs and never queue: the callers (the telemetry page) queue
them with ``costapp.tasks.ingest_runs_queue`` once the service returns.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.ingest import ingest_run_create
from costapp.models import Deployment, IngestRun
from costapp.sources.base import Window
from costapp.sources.prometheus import options_from_params, plan_steps
from costapp.sources.promql import selector_reason

logger = logging.getLogger(__name__)

SOURCE = "prometheus"
# Options a caller may pass through to the adapter
# (costapp.sources.prometheus.Options), with the bounds each must lie in.
OPTION_BOUNDS: dict[str, tuple[float, float]] = {
    "scrape_interval_s": (1, 3600),
    "slice_hours": (1, 7 * 24),
    "chunk_s": (1, 7 * 86400),
    "baseline_lookback_s": (60, 30 * 86400),
    "born_lookback_s": (60, 90 * 86400),
}
OPTION_KEYS = {*OPTION_BOUNDS, "fleet_dcgm_selector"}
# Nothing older holds Prometheus telemetry (Prometheus 1.0 is from 2016); a
# year-1 start would be 740,000 steps of empty reads.
EARLIEST = datetime(2015, 1, 1, tzinfo=UTC)
# Steps (one per deployment and slice) a backfill may take without being
# confirmed: 2,000 is 20 deployments x 100 days at one-day slices.
MAX_STEPS = 2000


def _check_deployments(names: list[str]) -> list[Deployment]:
    found = {d.name: d for d in Deployment.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise InvalidInput("deployments", ", ".join(unknown), "not in the fleet")
    no_selector = [n for n in names if not found[n].prometheus_selector.strip()]
    if no_selector:
        raise InvalidInput(
            "deployments", ", ".join(no_selector), "no Prometheus selector set"
        )
    return [found[n] for n in names]


def _check_window(start: datetime, end: datetime, now: datetime) -> Window:
    latest = now + timedelta(days=1)
    for field, value in (("start", start), ("end", end)):
        if value.tzinfo is not None and not EARLIEST <= value <= latest:
            raise InvalidInput(
                field,
                value.isoformat(),
                f"outside {EARLIEST:%Y-%m-%d} .. {latest:%Y-%m-%d} (UTC), the "
                "days telemetry can hold",
            )
    try:
        return Window(start, end)
    except ValueError as exc:
        raise InvalidInput("end", end.isoformat(), str(exc)) from exc


def telemetry_run_create(
    *,
    deployments: list[str],
    start: datetime,
    end: datetime,
    dcgm_selectors: dict[str, str] | None = None,
    options: dict[str, Any] | None = None,
    confirmed: bool = False,
    now: datetime | None = None,
) -> IngestRun:
    """Check every input (Prometheus configured, window, selectors, options,
    step budget unless ``confirmed``) and store the run; the caller queues or
    executes it."""
    if not settings.PROMETHEUS_URL:
        raise InvalidInput(
            "PROMETHEUS_URL",
            "",
            "not set: telemetry backfills read Prometheus, Thanos Query, Mimir or "
            "VictoriaMetrics; set PROMETHEUS_URL (docs/telemetry.md)",
        )
    if not deployments:
        raise InvalidInput("deployments", "", "choose at least one")
    _check_deployments(deployments)
    window = _check_window(start, end, now or timezone.now())
    params: dict[str, Any] = {"deployments": list(deployments)}
    # Only this run's overrides are stored: without one, the adapter reads
    # each deployment's own dcgm_selector when the run executes.
    selectors: dict[str, str] = {}
    for name, value in (dcgm_selectors or {}).items():
        reason = selector_reason(value)
        if reason is not None:
            raise InvalidInput("dcgm_selector", value, reason)
        if value.strip():
            selectors[name] = value.strip()
    if selectors:
        params["dcgm_selectors"] = selectors
    for key, value in (options or {}).items():
        if key not in OPTION_KEYS:
            raise InvalidInput(key, value, "not a telemetry option")
        if value in (None, ""):
            continue
        if key == "fleet_dcgm_selector":
            reason = selector_reason(value)
            if reason is not None:
                raise InvalidInput(key, value, reason)
            value = value.strip()
        else:
            low, high = OPTION_BOUNDS[key]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not low <= value <= high
            ):
                raise InvalidInput(key, value, f"must lie in {low:g} .. {high:g}")
        params[key] = value
    steps = plan_steps(
        window, targets=len(deployments), options=options_from_params(params)
    )
    if steps > MAX_STEPS and not confirmed:
        raise InvalidInput(
            "end",
            end.isoformat(),
            f"this backfill takes {steps:,} steps ({len(deployments)} deployment(s) "
            f"x {window.start:%Y-%m-%d} .. {window.end:%Y-%m-%d}), over the budget "
            f"of {MAX_STEPS:,}: confirm it, or backfill a shorter window",
        )
    return ingest_run_create(
        source=SOURCE, window=window, target=run_target(deployments), params=params
    )


TARGET_LENGTH = 200  # IngestRun.target


def run_target(names: list[str]) -> str:
    """The deployments a run reads, as the runs table shows them: all of
    them when they fit, else the first and how many more (the run's params
    keep the whole list; a refresh of a large fleet must not fail on it)."""
    text = ",".join(names)
    if len(text) <= TARGET_LENGTH:
        return text
    shown: list[str] = []
    for name in names:
        more = f" and {len(names) - len(shown) - 1} more"
        if len(",".join([*shown, name])) + len(more) > TARGET_LENGTH:
            break
        shown.append(name)
    return ",".join(shown) + f" and {len(names) - len(shown)} more"


def telemetry_refresh_create(
    *, now: datetime | None = None, hours: int | None = None
) -> list[IngestRun]:
    """The runs that re-pull the last few hours of every deployment with a
    selector, ``TELEMETRY_REFRESH_SPLIT`` deployments each (none: no
    Prometheus, or nothing to read); the caller executes them
    (``costapp.pipeline.runs.run_execute``), on as many live worker slots as
    there are.

    The current hour is incomplete and the previous one may still receive late
    samples (remote write, federation), so each refresh rewrites them.
    """
    if not settings.PROMETHEUS_URL:
        return []
    names = list(
        Deployment.objects.exclude(prometheus_selector="")
        .order_by("name")
        .values_list("name", flat=True)
    )
    now = now or timezone.now()
    hours = hours or settings.TELEMETRY_REFRESH_HOURS
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    split = settings.TELEMETRY_REFRESH_SPLIT
    return [
        telemetry_run_create(
            deployments=names[i : i + split],
            start=end - timedelta(hours=hours),
            end=end,
            confirmed=True,  # the schedule is the budget
        )
        for i in range(0, len(names), split)
    ]
