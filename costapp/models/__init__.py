from costapp.models.access import AuditEntry, Capability
from costapp.models.capacity import Calibration, Scenario
from costapp.models.costs import BillingPeriodSource, CostLine, RateCard
from costapp.models.economics import Budget, UnitCostFigure
from costapp.models.fleet import Deployment, Pool
from costapp.models.runs import IngestRun
from costapp.models.usage import (
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
)

__all__ = [
    "AuditEntry",
    "BillingPeriodSource",
    "Budget",
    "Calibration",
    "Capability",
    "CostLine",
    "Deployment",
    "DeploymentHour",
    "DeviceHour",
    "EngineDiscovery",
    "HistogramHour",
    "IngestRun",
    "Pool",
    "RateCard",
    "Scenario",
    "UnitCostFigure",
]
