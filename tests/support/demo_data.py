"""The demo fleet loaded once per test module, through the normal ingest path,
and wiped afterwards (module-scoped fixtures outside a test transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from costapp.economics.services import unit_costs_recompute
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
    Pool,
    RateCard,
    TeamHoliday,
    TelemetryRollup,
    TelemetryRollupDay,
    UnitCostFigure,
)

# Children before parents; every table the demo's ingest and recompute write,
# so a module's demo leaves nothing behind for the next module on its worker.
DEMO_TABLES = (UnitCostFigure, MonthForecastFigure, IdleFigure, BaselineCheckpoint, CostShare,
               CostShareDay, CostUsageDay, TelemetryRollup, HistogramRollup,
               TelemetryRollupDay, CostLine, DeviceHour, HistogramHour, DeploymentHour,
               EngineDiscovery, IngestRun, Deployment, Pool, RateCard, TeamHoliday)  # fmt: skip


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
    the recompute the pages read (as ``manage.py demo`` runs it) unless told
    otherwise, yielded, then wiped (``blocker``: pytest-django's
    ``django_db_blocker``)."""
    with blocker.unblock():
        demo_tables_wipe()
        run = demo_load(end=end, days=days)
        if recompute:
            unit_costs_recompute(now=end)
        yield run
        demo_tables_wipe()
