"""The protocol every source (Cost Explorer, FOCUS, Prometheus, demo) speaks.

A source turns a window into batches of plain records; ``costapp.ingest``
writes them. Sources never touch the ORM, so the pipeline does not know which
one it reads and each adapter can be tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal, Protocol


@dataclass(frozen=True)
class Window:
    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware (UTC)")
        if self.end <= self.start:
            raise ValueError(f"window end {self.end} is not after start {self.start}")


@dataclass(frozen=True)
class CostRecord:
    account_id: str
    period_start: datetime
    service: str
    granularity: Literal["day", "hour"] = "day"
    usage_type: str = ""
    record_type: str = "usage"
    commitment: str = ""  # "", "savings_plan" or "reserved" (models.costs)
    resource_id: str = ""
    tag_key: str = ""
    tag_value: str = ""
    region: str = ""
    currency: str = "USD"
    unblended_cost: Decimal | None = None
    amortized_cost: Decimal | None = None
    net_amortized_cost: Decimal | None = None
    net_unblended_cost: Decimal | None = None
    billed_cost: Decimal | None = None
    effective_cost: Decimal | None = None
    list_cost: Decimal | None = None
    usage_quantity: Decimal | None = None
    usage_unit: str = ""
    estimated: bool = False


@dataclass(frozen=True)
class DeploymentHourRecord:
    deployment: str  # Deployment.name
    hour: datetime
    requests_stop: float = 0.0
    requests_length: float = 0.0
    requests_aborted: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    # None when no replica count was seen in the hour: unknown, never 0.
    replicas_mean: float | None = None
    replicas_max: float | None = None
    # None when it could not be measured (no DCGM samples for a DCGM selector,
    # or no replica count): missing, never zero.
    gpu_seconds: float | None = None
    kv_cache_usage_mean: float | None = None
    kv_cache_usage_max: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    preemptions: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    # Prompt tokens by source (vLLM's prompt_tokens_by_source): None where
    # the engine does not split them.
    prompt_tokens_computed: float | None = None
    prompt_tokens_cache_hit: float | None = None
    prompt_tokens_transferred: float | None = None
    counts_exact: bool = True
    samples: int = 0
    # The newest sample of the hour (staleness is measured from it).
    last_sample_at: datetime | None = None


@dataclass(frozen=True)
class DeviceHourRecord:
    hostname: str
    gpu_uuid: str
    hour: datetime
    deployment: str | None = None
    gpu_index: int = 0
    gpu_model: str = ""
    mig_profile: str = ""
    gpu_instance_id: str = ""
    gpu_util_mean: float | None = None
    gr_engine_active_mean: float | None = None
    dram_active_mean: float | None = None
    fb_used_mib_mean: float | None = None
    fb_free_mib_mean: float | None = None
    power_w_mean: float | None = None
    energy_j: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class HistogramRecord:
    deployment: str
    hour: datetime
    metric: str
    bounds: tuple[float | None, ...]  # None is +Inf
    cumulative_counts: tuple[float, ...]
    total_sum: float = 0.0
    total_count: float = 0.0


@dataclass(frozen=True)
class DiscoveryRecord:
    deployment: str
    observed_at: datetime
    engine: str
    engine_generation: str = ""
    cache_config: dict[str, str] = field(default_factory=dict)
    series_found: tuple[str, ...] = ()
    series_missing: tuple[str, ...] = ()
    label_sets: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    error: str = ""


Record = (
    CostRecord
    | DeploymentHourRecord
    | DeviceHourRecord
    | HistogramRecord
    | DiscoveryRecord
)


@dataclass(frozen=True)
class ReplaceScope:
    """Rows of one source to delete before a batch is written, in the same
    transaction: a restated window or a FOCUS billing period is replaced whole,
    so a group that vanished in the restatement vanishes here too."""

    source: str
    account_id: str
    start: datetime
    end: datetime  # exclusive
    granularity: str = "day"


@dataclass(frozen=True)
class Batch:
    records: list[Record]
    replace: ReplaceScope | None = None
    # Progress the source reports with this batch (steps_done += steps).
    steps: int = 1
    api_requests: int = 0
    # What the run should say it could not measure (stored on the run).
    warnings: tuple[str, ...] = ()
    # What the source saw, by topic (the DCGM exporter generation per
    # deployment): kept on the run under params["observed"].
    observed: dict[str, dict[str, str]] = field(default_factory=dict)


class Source(Protocol):
    """An outside system seen as a stream of batches over a window."""

    name: str

    def plan(self, window: Window) -> int:
        """How many steps (pages, chunks) the window will take."""
        ...

    def fetch(self, window: Window) -> Iterator[Batch]: ...


class SourceError(Exception):
    """A source failed in a way the run should record (and maybe retry)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
