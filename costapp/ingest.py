"""Services that run a source over a window and write what it yields.

Writes are idempotent by construction: every record upserts on its natural key,
and a batch that carries a ``ReplaceScope`` first deletes the scope's rows in
the same transaction. Running any ingest twice leaves the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    DeviceHour,
    EngineDiscovery,
    HistogramHour,
    IngestRun,
)
from costapp.pgcopy import COPY_MIN_ROWS, copy_text, copy_upsert, staged_upsert
from costapp.sources.base import (
    Batch,
    CostRecord,
    DeploymentHourRecord,
    DeviceHourRecord,
    DiscoveryRecord,
    HistogramRecord,
    Record,
    ReplaceScope,
    Source,
    SourceError,
    Window,
)

logger = logging.getLogger(__name__)

BULK_SIZE = 2000
# Batches written in one transaction at most (ingest_run_execute).
GROUP_BATCHES = 100
GROUP_RECORDS = 5000
# A run keeps its first warnings; a year of hours cannot bloat the row.
MAX_WARNINGS = 200
CE_REQUEST_PRICE = Decimal("0.01")
AMOUNT_FIELDS = (
    "unblended_cost",
    "amortized_cost",
    "net_amortized_cost",
    "net_unblended_cost",
    "billed_cost",
    "effective_cost",
    "list_cost",
)


def needs_review(record: CostRecord, threshold: Decimal | None = None) -> bool:
    """Whether any amount of the line is at or above the plausibility
    threshold (COSTAPP_BILL_REVIEW_THRESHOLD, default 10M in the line's
    currency). Such a line is stored and flagged, never refused: an
    all-upfront reservation fee can be that large."""
    if threshold is None:
        threshold = Decimal(str(settings.COSTAPP_BILL_REVIEW_THRESHOLD))
    for name in AMOUNT_FIELDS:
        value = getattr(record, name)
        if value is not None and abs(value) >= threshold:
            return True
    return False


class UnknownDeployment(ValueError):
    pass


def _deployment_ids(names: Iterable[str | None]) -> dict[str, int]:
    wanted = {n for n in names if n}
    found = dict(Deployment.objects.filter(name__in=wanted).values_list("name", "id"))
    missing = wanted - found.keys()
    if missing:
        raise UnknownDeployment(
            "records name deployments that are not in the fleet: "
            + ", ".join(sorted(missing))
        )
    return found


def _values(record: Record, skip: str = "") -> dict[str, Any]:
    """A record's fields, shallow: ``dataclasses.asdict`` deep-copies every
    value and was a quarter of the demo's ingest time."""
    return {f.name: getattr(record, f.name) for f in fields(record) if f.name != skip}


def _upsert(
    model: type[models.Model],
    rows: Sequence[models.Model],
    unique_fields: Sequence[str],
    keep: Sequence[str] = (),
) -> int:
    """Insert or update by natural key; ``keep`` fields are not updated on an
    existing row (a new row still gets the value given)."""
    if not rows:
        return 0
    concrete = [f.name for f in model._meta.concrete_fields if not f.primary_key]
    update_fields = [f for f in concrete if f not in unique_fields and f not in keep]
    if connection.vendor == "postgresql" and len(rows) >= COPY_MIN_ROWS:
        # bulk_create sends every value as a parameter (an UNNEST array per
        # column): half the demo's load time. COPY streams them.
        return copy_upsert(model, rows, unique_fields, update_fields)
    model._default_manager.bulk_create(
        rows,
        batch_size=BULK_SIZE,
        update_conflicts=True,
        unique_fields=list(unique_fields),
        update_fields=update_fields,
    )
    return len(rows)


def _copy_decimal(value: Decimal | None) -> str:
    return "\\N" if value is None else format(value, "f")


def _copy_converters() -> list[Any]:
    """A COPY-text formatter per CostRecord field, chosen once by its type."""
    out: list[Any] = []
    for f in fields(CostRecord):
        kind = str(f.type)
        if "Decimal" in kind:
            out.append(_copy_decimal)
        elif kind == "datetime":
            out.append(datetime.isoformat)
        elif kind == "bool":
            out.append(lambda v: "t" if v else "f")
        else:
            out.append(copy_text)
    return out


def _costlines_copy_upsert(
    records: Sequence[CostRecord], *, source: str, run: IngestRun | None, now: datetime
) -> int:
    """The CostLine upsert on PostgreSQL: COPY into a temporary table, then one
    INSERT ... ON CONFLICT (natural key) DO UPDATE from it.

    Same rows and same effect as the ORM path (which SQLite keeps), several
    times faster for a month of lines: bulk_create sends parameters row by
    row, COPY streams them (bench/bench_bills.py, docs/benchmarks.md).
    """
    names = [f.name for f in fields(CostRecord)]
    columns = ["source", *names, "fetched_at", "run_id", "needs_review"]
    run_id = run.pk if run is not None else None
    tail = f"\t{copy_text(now)}\t{copy_text(run_id)}\t"
    threshold = Decimal(str(settings.COSTAPP_BILL_REVIEW_THRESHOLD))
    head = copy_text(source) + "\t"
    get = attrgetter(*names)
    convert = _copy_converters()
    staged_upsert(
        CostLine._meta.db_table,
        columns,
        CostLine.NATURAL_KEY,
        [c for c in columns if c not in CostLine.NATURAL_KEY],
        (
            "".join(
                head
                + "\t".join([f(v) for f, v in zip(convert, get(r), strict=True)])
                + tail
                + ("t\n" if needs_review(r, threshold) else "f\n")
                for r in records[start : start + BULK_SIZE]
            )
            for start in range(0, len(records), BULK_SIZE)
        ),
    )
    return len(records)


def _replace_delete(scope: ReplaceScope) -> int:
    deleted, _ = CostLine.objects.filter(
        source=scope.source,
        account_id=scope.account_id,
        granularity=scope.granularity,
        period_start__gte=scope.start,
        period_start__lt=scope.end,
    ).delete()
    return deleted


def records_write(
    *, records: Sequence[Record], source: str, run: IngestRun | None = None
) -> int:
    """Upsert a mixed list of records; returns rows written."""
    now = timezone.now()
    written = 0
    by_type: dict[type, list[Any]] = {}
    for record in records:
        by_type.setdefault(type(record), []).append(record)

    names: list[str | None] = []
    for group in by_type.values():
        names.extend(getattr(r, "deployment", None) for r in group)
    ids = _deployment_ids(names)

    costs = by_type.get(CostRecord, [])
    if connection.vendor == "postgresql" and len(costs) >= COPY_MIN_ROWS:
        written += _costlines_copy_upsert(costs, source=source, run=run, now=now)
    else:
        threshold = Decimal(str(settings.COSTAPP_BILL_REVIEW_THRESHOLD))
        written += _upsert(
            CostLine,
            [
                CostLine(
                    source=source,
                    fetched_at=now,
                    run=run,
                    needs_review=needs_review(r, threshold),
                    **_values(r),
                )
                for r in costs
            ],
            CostLine.NATURAL_KEY,
        )
    hours = by_type.get(DeploymentHourRecord, [])
    # GPU-seconds that could not be measured (None) never overwrite a figure
    # an earlier read measured; a measured one replaces it, even when smaller.
    for keep in ((), ("gpu_seconds",)):
        written += _upsert(
            DeploymentHour,
            [
                DeploymentHour(
                    deployment_id=ids[r.deployment],
                    run=run,
                    **_values(r, skip="deployment"),
                )
                for r in hours
                if (r.gpu_seconds is None) == bool(keep)
            ],
            DeploymentHour.NATURAL_KEY,
            keep=keep,
        )
    devices = by_type.get(DeviceHourRecord, [])
    written += _upsert(
        DeviceHour,
        [
            DeviceHour(
                deployment_id=ids.get(r.deployment) if r.deployment else None,
                run=run,
                **_values(r, skip="deployment"),
            )
            for r in devices
        ],
        DeviceHour.NATURAL_KEY,
    )
    histograms = by_type.get(HistogramRecord, [])
    written += _upsert(
        HistogramHour,
        [
            HistogramHour(
                deployment_id=ids[r.deployment],
                hour=r.hour,
                metric=r.metric,
                bounds=list(r.bounds),
                cumulative_counts=list(r.cumulative_counts),
                total_sum=r.total_sum,
                total_count=r.total_count,
                run=run,
            )
            for r in histograms
        ],
        HistogramHour.NATURAL_KEY,
    )
    discoveries = by_type.get(DiscoveryRecord, [])
    written += _upsert(
        EngineDiscovery,
        [
            EngineDiscovery(
                deployment_id=ids[r.deployment],
                **{
                    **_values(r, skip="deployment"),
                    "series_found": list(r.series_found),
                    "series_missing": list(r.series_missing),
                },
            )
            for r in discoveries
        ],
        ["deployment"],
    )
    return written


def batch_write(
    *, batch: Batch, source: str, run: IngestRun | None = None
) -> tuple[int, int]:
    """Write one batch atomically: (rows written, rows deleted)."""
    return batches_write(batches=[batch], source=source, run=run)


def _observed_keep(run: IngestRun, observed: list[dict[str, dict[str, str]]]) -> None:
    """Merge what the source saw into the run's params["observed"]."""
    params = IngestRun.objects.filter(pk=run.pk).values_list("params", flat=True)
    stored = dict(params.first() or {})
    seen: dict[str, dict[str, str]] = dict(stored.get("observed") or {})
    for topics in observed:
        for topic, values in topics.items():
            seen[topic] = {**seen.get(topic, {}), **values}
    IngestRun.objects.filter(pk=run.pk).update(params={**stored, "observed": seen})


@transaction.atomic
def batches_write(
    *, batches: Sequence[Batch], source: str, run: IngestRun | None = None
) -> tuple[int, int]:
    """Write batches in one transaction: (rows written, rows deleted). Each
    batch's replace scope is emptied first; the scopes of batches written
    together never hold one another's records (a source's batches are
    disjoint), so this is the batches written one after the other."""
    deleted = sum(_replace_delete(b.replace) for b in batches if b.replace)
    written = records_write(
        records=[r for b in batches for r in b.records], source=source, run=run
    )
    if run is not None:
        warnings = [w for b in batches for w in b.warnings]
        if warnings:
            stored = IngestRun.objects.filter(pk=run.pk).values_list(
                "warnings", flat=True
            )
            IngestRun.objects.filter(pk=run.pk).update(
                warnings=[*(stored.first() or []), *warnings][:MAX_WARNINGS]
            )
        observed = [b.observed for b in batches if b.observed]
        if observed:
            _observed_keep(run, observed)
        requests = sum(b.api_requests for b in batches)
        IngestRun.objects.filter(pk=run.pk).update(
            steps_done=F("steps_done") + sum(b.steps for b in batches),
            rows_written=F("rows_written") + written,
            rows_deleted=F("rows_deleted") + deleted,
            api_requests=F("api_requests") + requests,
            api_cost_usd=F("api_cost_usd") + CE_REQUEST_PRICE * requests
            if source == "cost_explorer"
            else F("api_cost_usd"),
        )
    return written, deleted


def ingest_run_create(
    *,
    source: str,
    window: Window,
    target: str = "",
    params: dict[str, Any] | None = None,
) -> IngestRun:
    return IngestRun.objects.create(
        source=source,
        target=target,
        window_start=window.start,
        window_end=window.end,
        params=params or {},
    )


def ingest_run_execute(*, run: IngestRun, source: Source) -> IngestRun:
    """Run ``source`` over the run's window, batch by batch.

    Each batch commits on its own, so a crash loses at most the batch in
    flight and a rerun (upserts) completes the window. A source error marks the
    run failed (nothing written yet) or partial (some batches written).
    """
    window = Window(run.window_start, run.window_end)
    run.start(steps_total=source.plan(window), steps_done=0, warnings=[])
    batches_written = 0
    group: list[Batch] = []

    def flush() -> None:
        nonlocal batches_written
        if group:
            batches_write(batches=group, source=source.name, run=run)
            batches_written += len(group)
            group.clear()

    try:
        for batch in source.fetch(window):
            # Small batches (a deployment's slice of a refresh) are written a
            # group per transaction: a thousand deployments are a few dozen
            # transactions, not a thousand. A crash loses the group in
            # flight; a rerun (upserts) completes it.
            group.append(batch)
            if (
                batch.replace is not None
                or len(group) >= GROUP_BATCHES
                or sum(len(b.records) for b in group) >= GROUP_RECORDS
            ):
                flush()
        flush()
    except (SourceError, UnknownDeployment) as exc:
        try:
            flush()  # what was read before the error is kept, as before
        except UnknownDeployment:
            pass
        status = IngestRun.PARTIAL if batches_written else IngestRun.FAILED
        logger.warning("ingest run %s %s: %s", run.pk, status, exc)
        # Requests made for the batch that failed were paid for too.
        spent = int(getattr(exc, "api_requests", 0) or 0)
        run.finish(
            status,
            error=str(exc),
            api_requests=F("api_requests") + spent,
            api_cost_usd=F("api_cost_usd") + CE_REQUEST_PRICE * spent
            if source.name == "cost_explorer"
            else F("api_cost_usd"),
        )
    else:
        run.finish(IngestRun.SUCCEEDED)
    return run
