"""The demo fleet loaded once per test module, through the normal ingest path,
and wiped afterwards (module-scoped fixtures outside a test transaction)."""

from __future__ import annotations

from datetime import datetime

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
