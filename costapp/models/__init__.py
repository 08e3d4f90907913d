from costapp.models.access import AuditEntry, Capability
from costapp.models.alerts import (
    AlertEvent,
    AlertRule,
    AlertRuleEvaluated,
    AlertState,
    Channel,
    Delivery,
    Silence,
)
from costapp.models.api import ApiToken
from costapp.models.capacity import Calibration, Scenario
from costapp.models.changes import DataChange, DataChangeTotal
from costapp.models.costs import (
    BillingPeriodSource,
    CostExportDay,
    CostExportRow,
    CostLine,
    CostShare,
    CostShareDay,
    CostUsageDay,
    RateCard,
)
from costapp.models.economics import (
    BaselineCheckpoint,
    Budget,
    IdleFigure,
    MonthForecastFigure,
    TeamHoliday,
    UnitCostFigure,
)
from costapp.models.fleet import Deployment, Pool
from costapp.models.pipeline import PipelineStep
from costapp.models.rollups import (
    HistogramRollup,
    TelemetryRollup,
    TelemetryRollupDay,
)
from costapp.models.runs import IngestRun
from costapp.models.saved_views import SavedView
from costapp.models.usage import (
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
)

__all__ = [
    "AlertEvent",
    "AlertRule",
    "AlertRuleEvaluated",
    "AlertState",
    "ApiToken",
    "AuditEntry",
    "BaselineCheckpoint",
    "BillingPeriodSource",
    "Budget",
    "Calibration",
    "Capability",
    "Channel",
    "CostExportDay",
    "CostExportRow",
    "CostLine",
    "CostShare",
    "CostShareDay",
    "CostUsageDay",
    "DataChange",
    "DataChangeTotal",
    "Delivery",
    "Deployment",
    "DeploymentHour",
    "DeviceHour",
    "EngineDiscovery",
    "HistogramHour",
    "HistogramRollup",
    "IdleFigure",
    "IngestRun",
    "MonthForecastFigure",
    "PipelineStep",
    "Pool",
    "RateCard",
    "SavedView",
    "Scenario",
    "Silence",
    "TeamHoliday",
    "TelemetryRollup",
    "TelemetryRollupDay",
    "UnitCostFigure",
]
