"""Prometheus (or Thanos Query, Mimir, VictoriaMetrics) as a telemetry source.

Counts come from RAW samples: a range selector ``{...}[Nms]`` evaluated with
/api/v1/query at the end of each chunk returns every stored sample, and
``analytics.telemetry`` turns them into reset-aware hourly increases (exact).
``increase()`` extrapolates to the window edges; the optional "increase" mode
uses it (for stores that only keep downsampled data) and marks the hours
``counts_exact=False``.

Limits respected on every request (docs/telemetry.md): at most ``max_points``
samples per series per request (Prometheus refuses range queries of more than
11,000 points) and at most ``max_samples`` loaded samples per query
(``query.max-samples``), estimated as series x range / scrape interval with the
series counted beforehand through /api/v1/series (index only, no samples read).

The window is cut into hour-aligned slices (one batch per deployment and slice,
so a failure keeps every finished slice); inside a slice the chunk requests of
all deployments run concurrently with a bound.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from analytics.telemetry import HOUR_S
from costapp.sources.base import (
    Batch,
    DeploymentHourRecord,
    DiscoveryRecord,
    Record,
    SourceError,
    Window,
)
from costapp.sources.engine_names import names_used
from costapp.sources.engines import (
    DCGM,
    DCGM_UP,
    ENGINES,
    dcgm_exporter_generation,
)
from costapp.sources.prometheus.client import (
    PrometheusClient,
    PrometheusConfig,
    QueryError,
)
from costapp.sources.prometheus.reader import (
    RawSeries,
    Reader,
    _label_key,
    _selector,
    merge_chunks,
)
from costapp.sources.prometheus.records import (
    CounterState,
    _hour,
    deployment_records,
    device_records,
)
from costapp.sources.prometheus.statics import engine_statics
from costapp.sources.prometheus.targets import Options, Target, plan_steps
from costapp.sources.prometheus.unmatched import (
    prefill_split_reason,
    unmatched_reason,
)
from costapp.sources.promql import selector_problem

logger = logging.getLogger(__name__)


@dataclass
class _Job:
    """Everything one target needs across slices."""

    target: Target
    names: list[str]
    dcgm_names: list[str]
    state: CounterState = field(default_factory=CounterState)
    dcgm_state: CounterState = field(default_factory=CounterState)
    error: str = ""


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        *,
        targets: Sequence[Target],
        config: PrometheusConfig,
        options: Options | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.targets = list(targets)
        self.config = config
        self.options = options or Options()
        if self.options.counts != "raw":
            # increase() extrapolates; rows from it would need counts_exact=False.
            # Not built yet: refuse rather than silently read raw samples.
            raise SourceError(
                f"counts={self.options.counts!r}: only raw-sample counts are built",
                permanent=True,
            )
        self.client = PrometheusClient(config)
        self.reader = Reader(self.client, self.options)
        self._now = now or (lambda: datetime.now(UTC))
        self.selector_errors: list[str] = []
        # (names, labels, start, end) -> series per name, from discovery.
        self._known_counts: dict[tuple[Any, ...], dict[str, int]] = {}
        # What could not be measured (GPU-hours unknown), for the run.
        self.warnings: list[str] = []
        # What the run saw (the DCGM exporter generation per deployment), kept
        # on the run beside its parameters.
        self.observed: dict[str, dict[str, str]] = {}
        problem = selector_problem(self.options.fleet_dcgm_selector)
        if problem is not None:
            raise SourceError(f"fleet_dcgm_selector={problem}", permanent=True)

    # -- protocol

    @staticmethod
    def _aligned(window: Window) -> tuple[int, int]:
        start = int(window.start.timestamp()) // HOUR_S * HOUR_S
        end = -(-math.ceil(window.end.timestamp()) // HOUR_S) * HOUR_S
        return start, end

    def _slices(self, window: Window) -> list[tuple[int, int]]:
        start, end = self._aligned(window)
        step = self.options.slice_hours * HOUR_S
        return [(a, min(a + step, end)) for a in range(start, end, step)]

    def plan(self, window: Window) -> int:
        return plan_steps(window, targets=len(self.targets), options=self.options)

    def fetch(self, window: Window) -> Iterator[Batch]:
        slices = self._slices(window)
        start, end = slices[0][0], slices[-1][1]
        before = self.client.requests
        jobs, discovery = self.discover(start, end)
        yield Batch(
            records=list(discovery),
            steps=1,
            api_requests=self.client.requests - before,
            warnings=tuple(self.warnings),
            observed=self.observed,
        )
        fleet: _Job | None = None
        if self.options.fleet_dcgm_selector:
            fleet = _Job(
                Target("", "vllm", "", dcgm_selector=self.options.fleet_dcgm_selector),
                [],
                sorted(DCGM),
            )
        with ThreadPoolExecutor(
            max_workers=self.config.concurrency, thread_name_prefix="prometheus"
        ) as pool:
            try:
                for a, b in slices:
                    yield from self._slice(pool, jobs, fleet, a, b)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        if self.selector_errors:
            raise SourceError("; ".join(self.selector_errors), permanent=True)

    # -- discovery

    def discover(
        self, start_s: int, end_s: int
    ) -> tuple[list[_Job], list[DiscoveryRecord]]:
        """Which expected series each deployment has, their labels, its config."""
        jobs: list[_Job] = []
        records: list[DiscoveryRecord] = []
        observed = self._now()
        found_of = self._series_of_targets(start_s, end_s)
        for target in self.targets:
            table = ENGINES.get(target.engine)
            if table is None:
                self.selector_errors.append(
                    f"{target.name}: unknown engine {target.engine!r}"
                )
                continue
            # Stored runs and deployments are checked again here, where the
            # text is spliced into PromQL: nothing unchecked reaches Prometheus.
            problem = selector_problem(target.selector)
            if problem is not None:
                message = f"{target.name}: prometheus_selector={problem}"
                self.selector_errors.append(message)
                records.append(
                    DiscoveryRecord(
                        deployment=target.name,
                        observed_at=observed,
                        engine=target.engine,
                        error=message,
                    )
                )
                continue
            try:
                found = _result(found_of[("main", target.name)])
            except QueryError as exc:
                message = (
                    f"{target.name}: selector {{{target.selector}}} was refused by "
                    f"Prometheus ({exc.error_type or 'error'}): {exc}"
                )
                self.selector_errors.append(message)
                records.append(
                    DiscoveryRecord(
                        deployment=target.name,
                        observed_at=observed,
                        engine=target.engine,
                        error=message,
                    )
                )
                continue
            names = sorted({s.get("__name__", "") for s in found} & set(table.roles))
            used = names_used(table, names)
            error = ""
            if not names:
                error = (
                    f"{target.name}: selector {{{target.selector}}} matched no "
                    f"{target.engine} series between {_hour(start_s):%Y-%m-%d %H:%M} "
                    f"and {_hour(end_s):%Y-%m-%d %H:%M} UTC (Prometheus answered an "
                    "empty result)"
                )
                self.selector_errors.append(error)
            split = prefill_split_reason(target, found) if names else ""
            if split:
                # Read as one pool, every request would count twice: not read.
                error = f"{target.name}: {split}"
                self.selector_errors.append(error)
                names = []
            label_sets: dict[str, list[dict[str, str]]] = defaultdict(list)
            cache_config: dict[str, str] = {}
            for s in found:
                name = s.get("__name__", "")
                labels = {k: v for k, v in s.items() if k != "__name__"}
                if name == "vllm:cache_config_info":
                    cache_config = dict(sorted(labels.items()))
                if name.endswith("_bucket"):
                    labels.pop("le", None)
                if labels not in label_sets[name] and len(label_sets[name]) < 20:
                    label_sets[name].append(labels)
            try:
                cache_config |= engine_statics(
                    self.client, table, names, target.selector,
                    start_s=start_s, end_s=end_s,
                )  # fmt: skip
            except QueryError as exc:
                self.warnings.append(f"{target.name}: static settings unread: {exc}")
            dcgm_names: list[str] = []
            dcgm_problem = selector_problem(target.dcgm_selector)
            if dcgm_problem is not None:
                message = (
                    f"{target.name}: dcgm_selector={dcgm_problem}; GPU-hours unknown"
                )
                self.selector_errors.append(message)
                error = "; ".join(p for p in (error, message) if p)
            elif target.dcgm_selector:
                try:
                    dcgm_found = _result(found_of[("dcgm", target.name)])
                except QueryError as exc:
                    message = (
                        f"{target.name}: DCGM selector {{{target.dcgm_selector}}} was "
                        f"refused by Prometheus ({exc.error_type or 'error'}): {exc}"
                    )
                    message += "; GPU-hours unknown"
                    self.selector_errors.append(message)
                    error = "; ".join(p for p in (error, message) if p)
                    dcgm_found = None
                dcgm_names = sorted({s.get("__name__", "") for s in dcgm_found or []})
                if dcgm_found is not None and not dcgm_names:
                    message = (
                        f"{target.name}: DCGM selector {{{target.dcgm_selector}}} "
                        "matched no DCGM series between "
                        f"{_hour(start_s):%Y-%m-%d %H:%M} and "
                        f"{_hour(end_s):%Y-%m-%d %H:%M} UTC: GPU-hours "
                        "unknown (not zero) for every hour read; "
                        + self._unmatched_why(target.dcgm_selector, start_s, end_s)
                    )
                    self.warnings.append(message)
                    error = "; ".join(p for p in (error, message) if p)
                for s in dcgm_found or []:
                    name = s.get("__name__", "")
                    labels = {k: v for k, v in s.items() if k != "__name__"}
                    if labels not in label_sets[name] and len(label_sets[name]) < 20:
                        label_sets[name].append(labels)
            if dcgm_names:
                generation = dcgm_exporter_generation(dcgm_found or [])
                self.observed.setdefault("dcgm_exporter", {})[target.name] = (
                    generation or "unknown (no host label)"
                )
            records.append(
                DiscoveryRecord(
                    deployment=target.name,
                    observed_at=observed,
                    engine=target.engine,
                    engine_generation=used.generation,
                    cache_config=cache_config,
                    series_found=used.found + tuple(dcgm_names),
                    series_missing=used.missing,
                    label_sets=dict(label_sets),
                    error=error,
                )
            )
            if names or dcgm_names:
                jobs.append(_Job(target, names, dcgm_names))
                # The index read above is the count of the series a read of
                # the whole window plans its chunks by: kept, not asked again.
                self._known_counts[(tuple(names), target.selector, start_s, end_s)] = (
                    _counted(found, names)
                )
                if dcgm_names:
                    self._known_counts[
                        (tuple(dcgm_names), target.dcgm_selector, start_s, end_s)
                    ] = _counted(dcgm_found or [], dcgm_names)
        return jobs, records

    def _unmatched_why(self, selector: str, start_s: int, end_s: int) -> str:
        """Why a DCGM selector matched nothing, from the index (read only when
        a selector failed)."""

        def lookup(labels: str) -> list[dict[str, str]]:
            return self.client.series(
                [_selector(sorted(DCGM), labels)], start_s * 1000, end_s * 1000 - 1
            )

        try:
            return unmatched_reason(selector, lookup)
        except QueryError as exc:
            return f"check the selector (the index read to say why failed: {exc})"

    def _series_of_targets(
        self, start_s: int, end_s: int
    ) -> dict[tuple[str, str], list[dict[str, str]] | QueryError]:
        """Every target's series lookups (its engine's names, its DCGM
        selector's), at the configured concurrency: a thousand deployments
        are a thousand index reads, one after the other otherwise. Only the
        selectors that pass the checks are sent; a refusal is kept, for the
        target's own record."""
        wanted: list[tuple[tuple[str, str], str]] = []
        for target in self.targets:
            table = ENGINES.get(target.engine)
            if table is None or selector_problem(target.selector) is not None:
                continue
            wanted.append(
                (("main", target.name), _selector(table.names(), target.selector))
            )
            if target.dcgm_selector and selector_problem(target.dcgm_selector) is None:
                wanted.append(
                    (
                        ("dcgm", target.name),
                        _selector(sorted(DCGM), target.dcgm_selector),
                    )
                )

        def lookup(selector: str) -> list[dict[str, str]] | QueryError:
            try:
                return self.client.series([selector], start_s * 1000, end_s * 1000 - 1)
            except QueryError as exc:
                return exc

        with ThreadPoolExecutor(
            max_workers=self.config.concurrency, thread_name_prefix="prometheus"
        ) as pool:
            results = list(pool.map(lookup, [selector for _, selector in wanted]))
        return {key: result for (key, _), result in zip(wanted, results, strict=True)}

    # -- one slice

    def _counts(self, names: list[str], labels: str, a: int, b: int) -> dict[str, int]:
        found = self.client.series([_selector(names, labels)], a * 1000, b * 1000 - 1)
        counts: dict[str, int] = defaultdict(int)
        for s in found:
            counts[s.get("__name__", "")] += 1
        return dict(counts)

    def _start(
        self,
        pool: ThreadPoolExecutor,
        wanted: Sequence[tuple[list[str], str, int, int]],
    ) -> list[list[Future[Any]]]:
        """Submit the raw reads of each (names, labels, a, b) in ``[a, b)``: one
        list of chunk futures per item, in order (``merge_chunks`` of their
        results is the item's series).

        Every task in the pool is a leaf (one HTTP request), so a bounded pool
        never waits on itself.
        """
        count_futures = [
            self._known_counts.get((tuple(names), labels, a, b))
            or pool.submit(self._counts, names, labels, a, b)
            for names, labels, a, b in wanted
        ]
        chunk_futures: list[list[Future[Any]]] = []
        for (_, labels, a, b), f in zip(wanted, count_futures, strict=True):
            counts = f if isinstance(f, dict) else f.result()
            plan = (
                self.reader.plan(counts, a * 1000 - 1, b * 1000 - 1) if counts else []
            )
            chunk_futures.append(
                [
                    pool.submit(self.reader.fetch_chunk, ns, labels, x, y)
                    for ns, x, y in plan
                ]
            )
        return chunk_futures

    def _born(
        self,
        names: list[str],
        labels: str,
        slice_start: int,
        state: CounterState,
        series: list[RawSeries],
    ) -> Callable[[dict[str, str]], bool]:
        """A series with no earlier sample known and absent from the index over
        the born lookback started inside the window: its first value counts."""
        unknown = [s for s in series if _label_key(s.labels) not in state.last]
        if not unknown:
            return lambda labels: False
        existed = {
            _label_key(s)
            for s in self.client.series(
                [_selector(sorted({s.labels["__name__"] for s in unknown}), labels)],
                (slice_start - self.options.born_lookback_s) * 1000,
                slice_start * 1000 - 1,
            )
        }
        return lambda lbls: _label_key(lbls) not in existed

    def _slice(
        self,
        pool: ThreadPoolExecutor,
        jobs: list[_Job],
        fleet: _Job | None,
        a: int,
        b: int,
    ) -> Iterator[Batch]:
        all_jobs = [*jobs, *([fleet] if fleet else [])]
        # The previous sample of each counter before the first slice is the
        # baseline of its first increase (later slices carry it over).
        baseline: list[tuple[list[str], str, int, int]] = []
        owners: list[CounterState] = []
        lookback = self.options.baseline_lookback_s
        for job in all_jobs:
            for names, labels, state in (
                (job.names, job.target.selector, job.state),
                (job.dcgm_names, job.target.dcgm_selector, job.dcgm_state),
            ):
                if names and not state.last:
                    baseline.append((names, labels, a - lookback, a))
                    owners.append(state)
        before = self.client.requests
        wanted: list[tuple[list[str], str, int, int]] = []
        for job in all_jobs:
            wanted.append((job.names, job.target.selector, a, b))
            wanted.append((job.dcgm_names, job.target.dcgm_selector, a, b))
        wanted_nonempty = [w for w in wanted if w[0]]
        # Baselines and the slice's reads are all submitted at once (the pool
        # stays full); the records of each deployment are built as soon as its
        # own reads are in, while the pool goes on with the others'.
        started = self._start(pool, [*baseline, *wanted_nonempty])
        for state, fs in zip(owners, started[: len(baseline)], strict=True):
            for s in merge_chunks([f.result() for f in fs]):
                state.last[_label_key(s.labels)] = (float(s.t[-1]), float(s.v[-1]))
        pending = iter(started[len(baseline) :])
        reads = [next(pending) if w[0] else [] for w in wanted]
        # Yielded only once every read of the slice is in: a failure stores
        # none of the slice's batches, as before.
        built: list[tuple[list[Record], tuple[str, ...]]] = []
        for i, job in enumerate(all_jobs):
            main = merge_chunks([f.result() for f in reads[2 * i]])
            dcgm = merge_chunks([f.result() for f in reads[2 * i + 1]])
            records: list[Record] = []
            # A deployment read through a DCGM selector is measured by DCGM
            # only: when the selector matched nothing (or was refused), its
            # hours are unknown, not replicas x GPUs and never 0.
            device_seconds: dict[int, float] | None = (
                {} if job.target.dcgm_selector else None
            )
            if job.dcgm_names:
                born = self._born(
                    job.dcgm_names, job.target.dcgm_selector, a, job.dcgm_state, dcgm
                )
                devices, device_seconds = device_records(
                    deployment=job.target.name or None,
                    series=dcgm,
                    born=born,
                    state=job.dcgm_state,
                    slice_start_s=a,
                    slice_end_s=b,
                    interval_default=self.options.scrape_interval_s,
                )
                records.extend(devices)
            if job.names:
                born = self._born(job.names, job.target.selector, a, job.state, main)
                records.extend(
                    deployment_records(
                        target=job.target,
                        series=main,
                        born=born,
                        state=job.state,
                        slice_start_s=a,
                        slice_end_s=b,
                        interval_default=self.options.scrape_interval_s,
                        device_seconds=device_seconds,
                    )
                )
            warnings = _unknown_gpu_hours(job, records)
            if job.names:
                # Complete hours only: the current one may not be scraped yet.
                now_hour = int(self._now().timestamp()) // HOUR_S * HOUR_S
                warnings += _unseen_hours(job, records, a, min(b, now_hour))
            built.append((records, warnings))
        for records, warnings in built:
            yield Batch(
                records=records,
                steps=1,
                api_requests=self.client.requests - before,
                warnings=warnings,
            )
            before = self.client.requests


def _counted(found: list[dict[str, str]], names: list[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for s in found:
        name = s.get("__name__", "")
        if name in names:
            counts[name] += 1
    return dict(counts)


def _result(found: list[dict[str, str]] | QueryError) -> list[dict[str, str]]:
    if isinstance(found, QueryError):
        raise found
    return found


def _unknown_gpu_hours(job: _Job, records: list[Record]) -> tuple[str, ...]:
    """One warning per deployment and slice naming the hours whose GPU-seconds
    could not be measured, and why."""
    hours = [
        r.hour
        for r in records
        if isinstance(r, DeploymentHourRecord) and r.gpu_seconds is None
    ]
    if not hours:
        return ()
    target = job.target
    if target.dcgm_selector:
        device_up = " or ".join(sorted(DCGM_UP, key=DCGM_UP.__getitem__))
        why = f"no {device_up} samples for {{{target.dcgm_selector}}}"
    else:
        table = ENGINES[target.engine]
        up = sorted(
            name
            for name, roles in table.roles.items()
            if any(r.kind == "gauge" and r.field == table.up_field for r in roles)
        )
        why = f"no DCGM selector and no {' or '.join(up)} samples (replicas unknown)"
    return (
        f"{target.name}: GPU-hours unknown for {_span(hours)} ({why}); a figure stored "
        "by an earlier read is kept",
    )


def _span(hours: list[datetime]) -> str:
    if len(hours) == 1:
        return f"{hours[0]:%Y-%m-%d %H:%M} UTC"
    return (
        f"{len(hours)} hours from {hours[0]:%Y-%m-%d %H:%M} to "
        f"{hours[-1]:%Y-%m-%d %H:%M} UTC"
    )


def _unseen_hours(
    job: _Job, records: list[Record], start_s: int, end_s: int
) -> tuple[str, ...]:
    """The past hours of a slice without a single sample: no row is written
    (missing, not zero), so what an earlier read stored for them stays."""
    seen = {
        int(r.hour.timestamp()) for r in records if isinstance(r, DeploymentHourRecord)
    }
    unseen = [_hour(h) for h in range(start_s, end_s, HOUR_S) if h not in seen]
    if not unseen:
        return ()
    return (
        f"{job.target.name}: no samples for {_span(unseen)}: no row written for "
        "them (missing, not zero); rows stored by an earlier read are kept",
    )
