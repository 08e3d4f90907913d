"""Reads of the bill shared by the costs pages, the export and the overview:
the cost bases, the bill lines of a window, the allocation rules, measured
usage and the ingest runs. The allocated bill built on them (stored per UTC
day, computed on the fly where stale) is ``costapp.costs.allocations``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncDate

from analytics.allocation import Overhead, Rule
from costapp.days import utc_midnight
from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    IngestRun,
    Pool,
)
from costapp.sources.base import Window
from costapp.sources.cost_explorer import month_chunks

logger = logging.getLogger(__name__)

Basis = Literal["amortized", "unblended", "net_amortized"]
BASES: dict[str, str] = {
    "amortized": "amortized (default)",
    "unblended": "unblended",
    "net_amortized": "net amortized",
}
DEFAULT_BASIS: Basis = "amortized"
HOUR_UNITS = {"Hrs", "Hours", "Hour", "hours", "hour", "Hrs."}


def basis_or_default(value: str | None) -> Basis:
    return value if value in BASES else DEFAULT_BASIS  # type: ignore[return-value]


def line_amount(line: CostLine, basis: Basis) -> Decimal:
    """A line's cost in ``basis``. FOCUS lines carry BilledCost as unblended and
    EffectiveCost as amortized; EffectiveCost already includes negotiated
    discounts, so it also stands for net amortized when that is absent."""
    if basis == "unblended":
        value = line.unblended_cost
    elif basis == "net_amortized":
        value = (
            line.net_amortized_cost
            if line.net_amortized_cost is not None
            else line.amortized_cost
        )
    else:
        value = line.amortized_cost
    return value if value is not None else Decimal(0)


def deployments_in_scope_read(
    *, team: str = "", deployments: Collection[str] | None = None
) -> set[str] | None:
    """The deployments a reader's ``team=``/``deployments=`` leave in scope;
    None when neither is given (the whole fleet, idle and unallocated too)."""
    if not team and deployments is None:
        return None
    qs = Deployment.objects.all()
    if team:
        qs = qs.filter(team=team)
    if deployments is not None:
        qs = qs.filter(name__in=list(deployments))
    return set(qs.values_list("name", flat=True))


def cost_lines_read(start: date, end: date) -> Iterator[CostLine]:
    """Lines of UTC days ``start``..``end`` (exclusive). Where an account-day
    has daily lines, its hourly lines (the 14-day hourly pull) are left out so
    the day is never counted twice."""
    qs = CostLine.objects.filter(
        period_start__gte=utc_midnight(start), period_start__lt=utc_midnight(end)
    ).order_by("period_start", "account_id", "id")
    daily: set[tuple[str, date]] = set(
        (a, p.date())
        for a, p in qs.filter(granularity="day").values_list(
            "account_id", "period_start"
        )
    )
    for line in qs.iterator(chunk_size=5000):
        if (
            line.granularity == "hour"
            and (
                line.account_id,
                line.period_start.date(),
            )
            in daily
        ):
            continue
        yield line


# -- rules ------------------------------------------------------------------


def _one(item: Any) -> tuple[str, str, str] | None:
    if not isinstance(item, dict) or len(item) != 1:
        return None
    ((kind, value),) = item.items()
    return _match(kind, value)


def _match(kind: str, value: Any) -> tuple[str, str, str] | None:
    """(kind, value, tag_key) from one rule's JSON, or None if malformed."""
    if kind == "tag" and isinstance(value, Mapping):
        key, val = value.get("key"), value.get("value")
        if isinstance(key, str) and isinstance(val, str) and key:
            return "tag", val, key
        return None
    if kind in {"usage_type", "resource_id", "service"} and isinstance(value, str):
        return (kind, value, "") if value else None
    return None


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...]
    overheads: tuple[Overhead, ...]
    pools: tuple[Pool, ...]
    members: Mapping[str, tuple[str, ...]]

    @property
    def tag_keys(self) -> list[str]:
        keys = [r.tag_key for r in self.rules if r.kind == "tag"]
        keys += [o.tag_key for o in self.overheads if o.kind == "tag"]
        return list(dict.fromkeys(keys))


def allocation_rules_read() -> Rules:
    """Rules from Deployment.cost_rules and Pool.cost_rules (see docs/costs.md).

    A pool's cost_rules may also declare shared overheads:
    ``{"overhead": {"usage_type": "DataTransfer-Out-Bytes"}, "key": "requests"}``
    (key gpu_hours | requests | cost; ``"scope": "all"`` spreads over every
    deployment instead of the pool's). A malformed rule is skipped with a
    warning: the fleet form validates rules when they are written.
    """
    rules: list[Rule] = []
    overheads: list[Overhead] = []
    pools = tuple(Pool.objects.order_by("name"))
    members: dict[str, list[str]] = defaultdict(list)
    for name, rule_json, pool_name in Deployment.objects.values_list(
        "name", "cost_rules", "pool__name"
    ):
        if pool_name:
            members[pool_name].append(name)
        for item in rule_json or []:
            parsed = _one(item)
            if parsed is None:
                logger.warning("deployment %s: cost rule %r skipped", name, item)
                continue
            kind, value, tag_key = parsed
            rules.append(Rule(name, kind, value, tag_key))  # type: ignore[arg-type]
    for pool in pools:
        for item in pool.cost_rules or []:
            if isinstance(item, dict) and "overhead" in item:
                spec = item["overhead"]
                parsed = _one(spec)
                key = item.get("key", "gpu_hours")
                if parsed is None or key not in {"gpu_hours", "requests", "cost"}:
                    logger.warning("pool %s: overhead %r skipped", pool.name, item)
                    continue
                kind, value, tag_key = parsed
                overheads.append(
                    Overhead(
                        kind,  # type: ignore[arg-type]
                        value,
                        key,
                        tag_key,  # type: ignore[arg-type]
                        "" if item.get("scope") == "all" else pool.name,
                    )
                )
                continue
            parsed = _one(item)
            if parsed is None:
                logger.warning("pool %s: cost rule %r skipped", pool.name, item)
                continue
            kind, value, tag_key = parsed
            rules.append(Rule(pool.name, kind, value, tag_key, pool=True))  # type: ignore[arg-type]
    return Rules(
        tuple(rules),
        tuple(overheads),
        pools,
        {k: tuple(sorted(v)) for k, v in members.items()},
    )


# -- usage ------------------------------------------------------------------


@dataclass(frozen=True)
class UsageDay:
    gpu_hours: Decimal
    requests: Decimal
    # Hours whose GPU-seconds telemetry could not measure; they count at the
    # deployment's nominal GPUs (the fleet file's gpu_count, MIG share
    # applied), never as zero, and every figure built on them says so.
    nominal_hours: int = 0


NOMINAL_LABEL = "GPU-hours unknown for {n} h: nominal GPUs used"


def nominal_gpu_seconds_read() -> dict[str, float]:
    """GPU-seconds one hour of each deployment would use at its nominal size."""
    out = {}
    for dep in Deployment.objects.all():
        share = dep.gpu_share / dep.tensor_parallel_size if dep.mig_profile else 1.0
        out[dep.name] = 3600.0 * dep.gpu_count * share
    return out


def usage_days_read(start: date, end: date) -> dict[tuple[str, date], UsageDay]:
    """Measured GPU-hours (MIG already weighted) and finished requests per
    deployment and UTC day, from DeploymentHour. An hour with unknown
    GPU-seconds counts at the deployment's nominal GPUs (``nominal_hours``)."""
    # Summed per day in the database: a year of hours for a fleet is ~10^5
    # rows that Python would otherwise parse one timestamp at a time.
    nominal = nominal_gpu_seconds_read()
    rows = (
        DeploymentHour.objects.filter(
            hour__gte=utc_midnight(start), hour__lt=utc_midnight(end)
        )
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values("deployment__name", "day")
        .annotate(
            gpu_s=Sum("gpu_seconds"),
            unknown=Count("pk", filter=Q(gpu_seconds__isnull=True)),
            finished=Sum(F("requests_stop") + F("requests_length")),
        )
        .values_list("deployment__name", "day", "gpu_s", "unknown", "finished")
    )
    acc: dict[tuple[str, date], list[float]] = {}
    for name, day, gpu_s, unknown, finished in rows:
        acc[(name, day)] = [
            (gpu_s or 0.0) + unknown * nominal.get(name, 0.0),
            finished or 0.0,
            unknown,
        ]
    # Telemetry is float; six decimals of a GPU-hour (3.6 ms) is far below
    # what it measures, and a fixed scale keeps the split reproducible.
    return {
        k: UsageDay(Decimal(f"{v[0] / 3600:.6f}"), Decimal(f"{v[1]:.0f}"), int(v[2]))
        for k, v in acc.items()
    }


def token_days_read(
    start: date, end: date
) -> dict[tuple[str, date], tuple[float, float]]:
    """(deployment, UTC day) -> (prompt, generation) tokens, summed in SQL."""
    rows = (
        DeploymentHour.objects.filter(
            hour__gte=utc_midnight(start), hour__lt=utc_midnight(end)
        )
        .annotate(day=TruncDate("hour", tzinfo=UTC))
        .values_list("deployment__name", "day")
        .annotate(p=Sum("prompt_tokens"), g=Sum("generation_tokens"))
        .order_by()
    )
    return {
        (n, d): (float(p or 0.0), float(g or 0.0)) for n, d, p, g in rows.iterator()
    }


# -- runs and claims ------------------------------------------------------------


@dataclass(frozen=True)
class RunProgress:
    run: IngestRun
    days_total: int
    days_done: int
    percent: int


def run_progress(run: IngestRun) -> RunProgress:
    """Days done from the steps done: a Cost Explorer run commits one
    account-month after another, each worth its planned requests."""
    days_total = max(0, (run.window_end - run.window_start).days) or 1
    if run.source != "cost_explorer" or not run.steps_total:
        done = days_total if run.status == IngestRun.SUCCEEDED else 0
        return RunProgress(run, days_total, done, 100 if done else 0)
    # Stored at create time (costs.services.BackfillPlan.params).
    families = (run.params or {}).get("families")
    per_chunk = families if isinstance(families, int) and families > 0 else 1
    chunks = month_chunks(Window(run.window_start, run.window_end))
    accounts = max(1, run.steps_total // max(1, per_chunk * len(chunks)))
    steps, done_days = run.steps_done, 0
    for _ in range(accounts):
        for chunk in chunks:
            if steps < per_chunk:
                break
            steps -= per_chunk
            done_days += (chunk.end - chunk.start).days
    total = days_total * accounts
    return RunProgress(run, total, done_days, int(100 * done_days / total))


def recent_runs_read(limit: int = 20) -> list[IngestRun]:
    return list(IngestRun.objects.filter(source__in=["cost_explorer", "focus"])[:limit])


def previous_month_estimated_read(today: date) -> bool:
    first = today.replace(day=1)
    prev = (first - timedelta(days=1)).replace(day=1)
    return CostLine.objects.filter(
        source="cost_explorer",
        period_start__gte=utc_midnight(prev),
        period_start__lt=utc_midnight(first),
        estimated=True,
    ).exists()


def latest_bill_day_read() -> date:
    """The latest UTC day with a bill line; today when there is none."""
    latest = CostLine.objects.order_by("-period_start").values_list(
        "period_start", flat=True
    )[:1]
    return latest[0].astimezone(UTC).date() if latest else datetime.now(UTC).date()
