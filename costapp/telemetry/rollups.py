"""Stored two-hour rollups of the telemetry hours, and the pages' read of them.

``rollups_store`` sums each deployment's hours and histogram-hours of the
given UTC days per two hours (``series.prepare`` then ``series.rollup``: the
same additive rows the charts sum, so re-summing rollups gives what summing
the hours gives, to float rounding) and marks each day in
``TelemetryRollupDay``. Any later write to a day's hours or histogram-hours
deletes the mark (triggers, migration 0013); on PostgreSQL the writer and the
triggers share a (deployment, day) advisory lock, so a write that commits
while a day is rolled up waits and then drops the fresh mark.

Who stores them: the pipeline's rollups step after each ingest of telemetry
(``rollups_for_change``, outside the ingest's transactions: until it has run,
the pages read those days from the hours), and ``manage.py telemetry_rollup``
rebuilds a window (data loaded with COPY or from before migration 0013). ``page_read`` reads the rollups of the marked
days and the hours of the rest: slower where unmarked, never stale.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pandas as pd
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from analytics.downsample import Grid
from costapp.days import utc_midnight
from costapp.models import (
    Deployment,
    DeploymentHour,
    HistogramHour,
    HistogramRollup,
    TelemetryRollup,
    TelemetryRollupDay,
)
from costapp.models.functions import Epoch
from costapp.models.rollups import ROLLUP_FIELDS
from costapp.pgcopy import rows_insert
from costapp.telemetry.series import (
    LATENCY,
    Histograms,
    Raw,
    _fetch,
    _from_epoch,
    histograms_decode,
    raw_read,
    rollup,
)

logger = logging.getLogger(__name__)

GRAIN = pd.Timedelta(hours=2)
METRICS = tuple(m for m, _ in HistogramHour._meta.get_field("metric").choices or ())
# Days read and written per transaction by the command.
CHUNK_DAYS = 31


def _day_ranges(days: Iterable[date]) -> list[tuple[date, date]]:
    """Sorted days as half-open runs of consecutive days."""
    out: list[tuple[date, date]] = []
    for day in sorted(days):
        if out and out[-1][1] == day:
            out[-1] = (out[-1][0], day + timedelta(days=1))
        else:
            out.append((day, day + timedelta(days=1)))
    return out


def _lock(deployment_id: int, days: Iterable[date]) -> None:
    """The days' advisory locks, in the triggers' order (PostgreSQL only;
    SQLite has one writer at a time)."""
    if connection.vendor != "postgresql":
        return
    epoch = date(1970, 1, 1)
    with connection.cursor() as cursor:
        for day in sorted(days):
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)",
                [deployment_id, (day - epoch).days],
            )


def _histogram_rollups(
    deployment_id: int, grid: Grid, metric: str, h: Histograms
) -> list[HistogramRollup] | None:
    """Bucket increases summed per two hours and set of bounds; None when
    counts do not fit their bounds (left to the raw path to refuse)."""
    index = grid.index_of(h.times)
    starts = grid.starts
    by_bounds: dict[int, list[int]] = defaultdict(list)
    for row, b in enumerate(h.bounds):
        if index[row] >= 0:
            by_bounds[id(b)].append(row)
    out: list[HistogramRollup] = []
    for rows in by_bounds.values():
        bounds = h.bounds[rows[0]]
        if {len(h.counts[r]) for r in rows} != {len(bounds)}:
            return None
        bounds_text = json.dumps(bounds)
        matrix = np.asarray([h.counts[r] for r in rows], dtype=float)
        total = np.zeros((grid.count, matrix.shape[1]))
        np.add.at(total, index[rows], matrix)
        summed = np.bincount(
            index[rows],
            weights=np.asarray([h.sums[r] for r in rows], dtype=float),
            minlength=grid.count,
        )
        for i in np.unique(index[rows]):
            start = starts[i].to_pydatetime()
            out.append(
                HistogramRollup(
                    deployment_id=deployment_id,
                    day=start.date(),
                    start=start,
                    metric=metric,
                    bounds=bounds_text,
                    cumulative_counts=json.dumps(total[i].tolist()),
                    total_sum=float(summed[i]),
                )
            )
    return out


def _none(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def rollups_store(*, deployment_id: int, days: Collection[date]) -> int:
    """Roll up and mark ``days`` of one deployment, ``CHUNK_DAYS`` a
    transaction (joining the caller's, as in the ingest); returns the days
    marked. A day with no hour and no histogram-hour is marked too (its
    rollup is empty, as its hours are)."""
    marked = 0
    for a, b in _day_ranges(days):
        while a < b:
            c = min(b, a + timedelta(days=CHUNK_DAYS))
            marked += _store_chunk(deployment_id, a, c)
            a = c
    return marked


@transaction.atomic
def _store_chunk(deployment_id: int, a: date, b: date) -> int:
    chunk = [a + timedelta(days=i) for i in range((b - a).days)]
    _lock(deployment_id, chunk)
    computed_at = timezone.now()
    lo, hi = utc_midnight(a), utc_midnight(b)
    raw = raw_read(deployment_id, start=lo, end=hi, metrics=METRICS)
    grid = Grid(pd.Timestamp(lo), GRAIN, int((hi - lo) / GRAIN))
    rows = rollup(raw.prepared, grid)
    hist: list[HistogramRollup] = []
    for metric, h in raw.histograms.items():
        made = _histogram_rollups(deployment_id, grid, metric, h)
        if made is None:
            logger.warning(
                "telemetry rollup: deployment %s %s..%s: %s counts do not fit "
                "their bounds; days left to the hours",
                deployment_id,
                a,
                b,
                metric,
            )
            return 0
        hist.extend(made)
    TelemetryRollup.objects.filter(deployment_id=deployment_id, day__in=chunk).delete()
    HistogramRollup.objects.filter(deployment_id=deployment_id, day__in=chunk).delete()
    starts = pd.DatetimeIndex(rows["t"]).tz_localize("UTC")
    columns = {f: rows[f].to_numpy(float) for f in ROLLUP_FIELDS}
    rows_insert(
        TelemetryRollup,
        [
            TelemetryRollup(
                deployment_id=deployment_id,
                day=start.date(),
                start=start.to_pydatetime(),
                **{f: _none(columns[f][i]) for f in ROLLUP_FIELDS},
            )
            for i, start in enumerate(starts)
        ],
    )
    rows_insert(HistogramRollup, hist)
    TelemetryRollupDay.objects.filter(
        deployment_id=deployment_id, day__in=chunk
    ).delete()
    TelemetryRollupDay.objects.bulk_create(
        [
            TelemetryRollupDay(
                deployment_id=deployment_id, day=d, computed_at=computed_at
            )
            for d in chunk
        ]
    )
    return len(chunk)


def rollups_for_change(
    *,
    since: datetime | None,
    until: datetime | None,
    deployments: Collection[str] | None,
) -> int:
    """Re-store the UTC days of ``since``..``until`` (None: the first and the
    last stored hour) of ``deployments`` (None: every one): the pipeline's
    rollups step, after each ingest of telemetry. Returns the days marked."""
    if deployments is not None and not deployments:
        return 0
    hours = DeploymentHour.objects.all()
    if deployments is not None:
        hours = hours.filter(deployment__name__in=list(deployments))
    if since is None or until is None:
        span = hours.aggregate(first=Min("hour"), last=Max("hour"))
        if span["first"] is None:
            return 0
        since = since or span["first"]
        until = until or span["last"] + timedelta(hours=1)
    start = since.astimezone(UTC).date()
    end = (until - timedelta(microseconds=1)).astimezone(UTC).date() + timedelta(1)
    return rollups_rebuild(
        start=start,
        end=end,
        deployments=None if deployments is None else list(deployments),
    )


def fits(start: datetime, end: datetime, grids: Sequence[Grid]) -> bool:
    """Whether rollups can stand for the hours: the window and every grid
    on the two-hour boundaries, each bucket a whole number of rollups."""
    epoch = pd.Timestamp(0, tz="UTC")
    edges = [pd.Timestamp(start), pd.Timestamp(end), *(g.origin for g in grids)]
    return all((e - epoch) % GRAIN == pd.Timedelta(0) for e in edges) and all(
        g.width % GRAIN == pd.Timedelta(0) for g in grids
    )


def page_read(
    deployment: Deployment,
    *,
    start: datetime,
    end: datetime,
    grids: Sequence[Grid],
    metrics: Sequence[str] = LATENCY,
) -> Raw:
    """What ``raw_read`` returns for bucketing on ``grids``: rollups for the
    marked days where they fit, the hours of every other day."""
    if not fits(start, end, grids) or end <= start:
        return raw_read(deployment, start=start, end=end, metrics=metrics)
    first = start.astimezone(UTC).date()
    last = (end - timedelta(microseconds=1)).astimezone(UTC).date()
    marked = set(
        TelemetryRollupDay.objects.filter(
            deployment=deployment, day__gte=first, day__lte=last
        ).values_list("day", flat=True)
    )
    if not marked:
        return raw_read(deployment, start=start, end=end, metrics=metrics)
    all_days = {first + timedelta(days=i) for i in range((last - first).days + 1)}
    ranges = [
        (max(start, utc_midnight(a)), min(end, utc_midnight(b)))
        for a, b in _day_ranges(all_days - marked)
    ]
    window = {"deployment": deployment, "start__gte": start, "start__lt": end}
    rows = _fetch(
        TelemetryRollup.objects.filter(**window, day__in=marked).annotate(
            epoch=Epoch("start")
        ),
        ["epoch", *ROLLUP_FIELDS],
    )
    stored = pd.DataFrame.from_records(rows, columns=["t", *ROLLUP_FIELDS])
    stored = stored.astype(float)
    stored["t"] = _from_epoch(stored["t"])
    histograms = histograms_decode(
        _fetch(
            HistogramRollup.objects.filter(**window, day__in=marked, metric__in=metrics)
            .annotate(epoch=Epoch("start"))
            .order_by("metric", "start"),
            ["metric", "epoch", "bounds", "cumulative_counts", "total_sum"],
        ),
        metrics,
    )
    if not ranges:
        return Raw(start, end, stored, histograms)
    rest = raw_read(deployment, start=start, end=end, metrics=metrics, ranges=ranges)
    merged = {
        m: Histograms(
            times=np.concatenate([histograms[m].times, rest.histograms[m].times]),
            bounds=[*histograms[m].bounds, *rest.histograms[m].bounds],
            counts=[*histograms[m].counts, *rest.histograms[m].counts],
            sums=[*histograms[m].sums, *rest.histograms[m].sums],
        )
        for m in metrics
    }
    prepared = pd.concat([stored, rest.prepared], ignore_index=True)
    return Raw(start, end, prepared, merged)


def rollups_rebuild(
    *, start: date, end: date, deployments: Sequence[str] | None = None
) -> int:
    """Store ``start``..``end`` (exclusive) for ``deployments`` (default:
    every deployment); returns the deployment-days marked."""
    qs = Deployment.objects.order_by("name")
    if deployments is not None:
        qs = qs.filter(name__in=deployments)
    days = {start + timedelta(days=i) for i in range((end - start).days)}
    total = 0
    for pk in qs.values_list("pk", flat=True):
        total += rollups_store(deployment_id=pk, days=days)
    return total
