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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from costapp.sources.base import (
    Batch,
    DeploymentHourRecord,
    DiscoveryRecord,
    Record,
    SourceError,
    Window,
)
from costapp.sources.engines import DCGM, ENGINES, names_used
from costapp.sources.prometheus.client import (
    PrometheusClient,
    PrometheusConfig,
    QueryError,
)
from costapp.sources.prometheus.reader import (
    HOUR_S,
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
from costapp.sources.promql import selector_problem

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """One deployment as Prometheus sees it."""

    name: str
    engine: str
    selector: str  # label matchers without braces
    gpu_share: float = 1.0  # GPUs per replica when no DCGM selector is given
    dcgm_selector: str = ""


@dataclass(frozen=True)
class Options:
    # Used to size chunks before any sample is seen; a smaller value is safe
    # (smaller chunks), a larger one than reality is caught by Prometheus's
    # own limit and the chunk is halved.
    scrape_interval_s: float = 15.0
    slice_hours: int = 24
    # Forces a chunk length (tests compare chunked and unchunked reads).
    chunk_s: float | None = None
    counts: str = "raw"  # or "increase"
    # How far back the first slice looks for each counter's previous sample
    # (the baseline of the first increase) ...
    baseline_lookback_s: int = 6 * HOUR_S
    # ... and how far back a series must be absent to count as born inside the
    # window (its first value is then an increase from zero).
    born_lookback_s: int = 7 * 24 * HOUR_S
    # DCGM series not tied to a deployment (whole fleet), or "".
    fleet_dcgm_selector: str = ""


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
        # What could not be measured (GPU-hours unknown), for the run.
        self.warnings: list[str] = []
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
            selector = _selector(table.names(), target.selector)
            try:
                found = self.client.series([selector], start_s * 1000, end_s * 1000 - 1)
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
                    dcgm_found = self.client.series(
                        [_selector(sorted(DCGM), target.dcgm_selector)],
                        start_s * 1000,
                        end_s * 1000 - 1,
                    )
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
                        "unknown (not zero) for every hour read; check the selector"
                    )
                    self.warnings.append(message)
                    error = "; ".join(p for p in (error, message) if p)
                for s in dcgm_found or []:
                    name = s.get("__name__", "")
                    labels = {k: v for k, v in s.items() if k != "__name__"}
                    if labels not in label_sets[name] and len(label_sets[name]) < 20:
                        label_sets[name].append(labels)
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
        return jobs, records

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
            pool.submit(self._counts, names, labels, a, b)
            for names, labels, a, b in wanted
        ]
        chunk_futures: list[list[Future[Any]]] = []
        for (_, labels, a, b), f in zip(wanted, count_futures, strict=True):
            counts = f.result()
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
        why = f"no DCGM samples for {{{target.dcgm_selector}}}"
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


def plan_steps(window: Window, *, targets: int, options: Options) -> int:
    """Steps a run over ``window`` takes: discovery, then one per target (and
    the fleet's DCGM read) and slice. Also the backfill form's step budget."""
    start = int(window.start.timestamp()) // HOUR_S * HOUR_S
    end = -(-math.ceil(window.end.timestamp()) // HOUR_S) * HOUR_S
    slices = -(-(end - start) // (options.slice_hours * HOUR_S))
    fleet = 1 if options.fleet_dcgm_selector else 0
    return 1 + slices * (targets + fleet)


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


def targets_from_deployments(
    deployments: Sequence[Any], dcgm_selectors: dict[str, str] | None = None
) -> list[Target]:
    """One target per deployment; a DCGM selector given for this run (the
    backfill form, ``--dcgm-selector``) wins over ``Deployment.dcgm_selector``."""
    dcgm_selectors = dcgm_selectors or {}
    return [
        Target(
            name=d.name,
            engine=d.engine,
            selector=d.prometheus_selector,
            gpu_share=d.gpu_share,
            dcgm_selector=(
                dcgm_selectors.get(d.name) or getattr(d, "dcgm_selector", "") or ""
            ).strip(),
        )
        for d in deployments
    ]


def options_from_params(params: dict[str, Any]) -> Options:
    known = {f for f in Options.__dataclass_fields__}
    values = {k: v for k, v in params.items() if k in known}
    return replace(Options(), **values)
