"""The demo fleet loaded once per test module, through the normal ingest path,
and wiped afterwards (module-scoped fixtures outside a test transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import time_machine

from costapp.fleet.demo_setup import demo_fleet_load, demo_ingest
from costapp.fleet.services import rate_card_seed
from costapp.models import (
    BaselineCheckpoint,
    CostLine,
    CostShare,
    CostShareDay,
    CostUsageDay,
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    HistogramRollup,
    IdleFigure,
    IngestRun,
    MonthForecastFigure,
    PipelineStep,
    Pool,
    RateCard,
    TeamHoliday,
    TelemetryRollup,
    TelemetryRollupDay,
    UnitCostFigure,
)
from costapp.pipeline.runner import pipeline_drain
from costapp.pipeline.runs import run_followups

# Children before parents; every table the demo's ingest and recompute write,
# so a module's demo leaves nothing behind for the next module on its worker.
DEMO_TABLES = (UnitCostFigure, MonthForecastFigure, IdleFigure, BaselineCheckpoint, CostShare,
               CostShareDay, CostUsageDay, TelemetryRollup, HistogramRollup,
               TelemetryRollupDay, CostLine, DeviceHour, HistogramHour, DeploymentHour,
               EngineDiscovery, IngestRun, Deployment, Pool, RateCard, TeamHoliday,
               PipelineStep)  # fmt: skip


def demo_tables_wipe() -> None:
    for model in DEMO_TABLES:
        model.objects.all().delete()


def demo_load(*, end: datetime, days: int) -> IngestRun:
    """The demo fleet, its rate card and ``days`` of telemetry and bills."""
    demo_fleet_load(end=end)
    rate_card_seed()
    return demo_ingest(end=end, days=days)


@contextmanager
def demo_for_module(
    blocker: Any, *, end: datetime, days: int, recompute: bool = True
) -> Iterator[IngestRun]:
    """A module-scoped fixture's demo: wiped, loaded through the ingest, with
    what follows it in the pipeline (as ``manage.py demo`` runs it, an hour
    after ``end`` so its last hour is closed) or only its rollups, yielded,
    then wiped (``blocker``: pytest-django's ``django_db_blocker``)."""
    with blocker.unblock():
        demo_tables_wipe()
        run = demo_load(end=end, days=days)
        steps = run_followups(run)
        with time_machine.travel(end + timedelta(hours=1), tick=False):
            pipeline_drain(steps if recompute else ["rollups"])
        yield run
        demo_tables_wipe()
