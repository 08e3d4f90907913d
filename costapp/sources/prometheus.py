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

import ast
import json
import logging
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from analytics.telemetry import hourly_counter_increases, hourly_gauge_stats
from analytics.telemetry_windows import (
    BudgetTooSmall,
    chunk_length_ms,
    chunks,
    merge_samples,
    pack,
    scrape_interval,
    slot_totals,
)
from costapp.sources.base import (
    Batch,
    DeploymentHourRecord,
    DeviceHourRecord,
    DiscoveryRecord,
    HistogramRecord,
    Record,
    SourceError,
    Window,
)
from costapp.sources.engines import (
    ABORTED_FIELD,
    DCGM,
    DCGM_UP,
    ENGINES,
    REASON_FIELDS,
    DeviceKey,
    EngineTable,
    device_key,
    keeps_rank,
    names_used,
    replica_key,
)
from costapp.sources.prometheus_json import Samples, matrix_from_json

logger = logging.getLogger(__name__)

MAX_POINTS = 11_000
HOUR_S = 3600

LabelKey = tuple[tuple[str, str], ...]


# --------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    username: str = ""
    password: str = ""
    bearer_token: str = ""
    ca_bundle: str = ""
    # Extra headers, e.g. X-Scope-OrgID for Grafana Mimir tenants.
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    max_samples: int = 20_000_000
    max_points: int = MAX_POINTS
    concurrency: int = 4
    retries: int = 3
    backoff_s: float = 0.2
    # Ask Prometheus to gzip its answers. Off by default: on loopback or a LAN,
    # compressing on Prometheus's side and decompressing here costs more CPU
    # than the bytes saved (raw reads are ~20 bytes per sample); turn it on
    # across a WAN or a metered link, where bandwidth is the bottleneck.
    gzip: bool = False

    @classmethod
    def from_settings(cls, **overrides: Any) -> PrometheusConfig:
        from django.conf import settings

        values: dict[str, Any] = {
            "url": settings.PROMETHEUS_URL,
            "username": settings.PROMETHEUS_USERNAME,
            "password": settings.PROMETHEUS_PASSWORD,
            "bearer_token": settings.PROMETHEUS_BEARER_TOKEN,
            "ca_bundle": settings.PROMETHEUS_CA_BUNDLE,
            "headers": dict(settings.PROMETHEUS_HEADERS),
            "timeout_s": settings.PROMETHEUS_TIMEOUT_S,
            "max_samples": settings.PROMETHEUS_MAX_SAMPLES,
            "concurrency": settings.PROMETHEUS_CONCURRENCY,
            "gzip": settings.PROMETHEUS_GZIP,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


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


# --------------------------------------------------------------------------
# HTTP client


class QueryError(SourceError):
    """Prometheus refused a query (bad_data, execution): its own text is kept."""

    def __init__(self, message: str, *, error_type: str = "", query: str = "") -> None:
        super().__init__(message, permanent=True)
        self.error_type = error_type
        self.query = query


def _prometheus_error(exc: PrometheusApiClientException) -> tuple[str, str]:
    """(errorType, error) out of the client's "HTTP Status Code N (b'...')"."""
    text = str(exc)
    m = re.search(r"\((b'.*'|b\".*\")\)\s*$", text, re.S)
    if m:
        try:
            body = json.loads(ast.literal_eval(m.group(1)).decode("utf-8", "replace"))
            return str(body.get("errorType", "")), str(body.get("error", text))
        except (ValueError, SyntaxError, AttributeError):
            pass
    return "", text


class PrometheusClient:
    def __init__(self, config: PrometheusConfig) -> None:
        if not config.url:
            raise SourceError(
                "PROMETHEUS_URL is not set: point it at Prometheus, Thanos Query, "
                "Mimir or VictoriaMetrics (docs/telemetry.md)",
                permanent=True,
            )
        self.config = config
        self.url = config.url.rstrip("/")
        self.session = requests.Session()
        if config.ca_bundle:
            self.session.verify = config.ca_bundle
        headers = dict(config.headers)
        if not config.gzip:
            # requests asks for gzip by default; "identity" makes Prometheus
            # send the JSON as is (see PrometheusConfig.gzip).
            self.session.headers["Accept-Encoding"] = "identity"
        if config.bearer_token:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        self.session.headers.update(headers)
        auth = (config.username, config.password) if config.username else None
        # Connect errors and gateway errors are retried; a 4xx (bad PromQL, too
        # many samples) is an answer, never retried.
        self.retry = Retry(
            total=config.retries,
            connect=config.retries,
            read=False,
            status=config.retries,
            backoff_factor=config.backoff_s,
            status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=True,
        )
        self.prom = PrometheusConnect(
            url=self.url,
            headers=headers or None,
            retry=self.retry,
            auth=auth,
            session=self.session,
            timeout=config.timeout_s,  # type: ignore[arg-type]
        )
        adapter = HTTPAdapter(
            max_retries=self.retry,
            pool_maxsize=max(config.concurrency, 10),
        )
        self.session.mount(self.url, adapter)
        self.auth = auth
        self._lock = threading.Lock()
        self.requests = 0

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def _transport(self, exc: Exception, what: str) -> SourceError:
        if isinstance(exc, requests.Timeout):
            return SourceError(
                f"Prometheus at {self.url} did not answer within "
                f"{self.config.timeout_s:g} s ({what})"
            )
        if isinstance(exc, requests.exceptions.RetryError):
            reason = re.search(r"too many (\d+) error responses", str(exc))
            status = reason.group(1) if reason else "5xx"
            return SourceError(
                f"Prometheus at {self.url} kept answering 5xx ({status}) after "
                f"{self.config.retries} retries ({what})"
            )
        if isinstance(exc, requests.ConnectionError):
            cause = str(exc).split("Caused by ", 1)[-1][:200]
            return SourceError(
                f"cannot reach Prometheus at {self.url} ({what}): {cause}"
            )
        return SourceError(f"Prometheus request failed ({what}): {exc}")

    def _api_error(self, exc: PrometheusApiClientException, promql: str) -> SourceError:
        """A 5xx is the server's trouble (a rerun may pass); anything else is
        the query's, reported with Prometheus's own error text."""
        if re.search(r"HTTP Status Code 5\d\d", str(exc)):
            return SourceError(f"Prometheus at {self.url} answered {str(exc)[:300]}")
        error_type, text = _prometheus_error(exc)
        return QueryError(text, error_type=error_type, query=promql)

    def query(self, promql: str, at_ms: int) -> list[dict[str, Any]]:
        """Instant query at ``at_ms`` through prometheus-api-client."""
        self._count()
        try:
            result: list[dict[str, Any]] = self.prom.custom_query(
                promql, params={"time": f"{at_ms / 1000:.3f}"}
            )
        except PrometheusApiClientException as exc:
            raise self._api_error(exc, promql) from exc
        except requests.RequestException as exc:
            raise self._transport(exc, f"query {promql[:120]}") from exc
        return result

    def query_matrix(self, promql: str, at_ms: int) -> list[Samples]:
        """Raw samples of a range selector evaluated at ``at_ms``.

        The same GET as ``PrometheusConnect.custom_query`` (its session: auth,
        retries, headers, CA bundle, timeout), but the body is decoded by
        ``matrix_from_json`` into flat arrays: ``response.json()`` builds two
        Python objects per sample and was most of a backfill's time
        (docs/benchmarks.md).
        """
        self._count()
        prom = self.prom
        try:
            response = prom._session.request(
                method=prom._method,
                url=f"{self.url}/api/v1/query",
                params={"query": promql, "time": f"{at_ms / 1000:.3f}"},
                verify=prom._session.verify,
                headers=prom.headers,
                auth=prom.auth,
                cert=prom._session.cert,
                timeout=prom._timeout,
            )
        except requests.RequestException as exc:
            raise self._transport(exc, f"query {promql[:120]}") from exc
        if response.status_code >= 500:
            raise SourceError(
                f"Prometheus at {self.url} answered HTTP Status Code "
                f"{response.status_code} ({response.content[:300]!r})"
            )
        if response.status_code != 200:
            try:
                body = json.loads(response.content)
                error_type, text = str(body.get("errorType", "")), str(body["error"])
            except (ValueError, KeyError, AttributeError):
                error_type, text = "", response.text[:300]
            raise QueryError(text, error_type=error_type, query=promql)
        try:
            return matrix_from_json(response.content)
        except ValueError as exc:
            raise SourceError(
                f"Prometheus at {self.url} answered an unreadable body "
                f"({exc}; query {promql[:120]})"
            ) from exc

    def query_range(
        self, promql: str, start_s: float, end_s: float, step_s: float
    ) -> list[dict[str, Any]]:
        self._count()
        try:
            result: list[dict[str, Any]] = self.prom.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(start_s, UTC),
                end_time=datetime.fromtimestamp(end_s, UTC),
                step=f"{step_s:g}s",
            )
        except PrometheusApiClientException as exc:
            raise self._api_error(exc, promql) from exc
        except requests.RequestException as exc:
            raise self._transport(exc, f"query_range {promql[:120]}") from exc
        return result

    def series(
        self, matchers: Sequence[str], start_ms: int, end_ms: int
    ) -> list[dict[str, str]]:
        """Label sets of the series matching, from the index (no samples read).

        prometheus-api-client has no call for /api/v1/series; it goes through
        the same session (auth, retries, headers, CA bundle, timeout).
        """
        self._count()
        what = f"series {', '.join(matchers)[:120]}"
        try:
            response = self.session.get(
                f"{self.url}/api/v1/series",
                params={
                    "match[]": list(matchers),
                    "start": f"{start_ms / 1000:.3f}",
                    "end": f"{end_ms / 1000:.3f}",
                },
                auth=self.auth,
                timeout=self.config.timeout_s,
            )
        except requests.RequestException as exc:
            raise self._transport(exc, what) from exc
        if response.status_code >= 500:
            raise SourceError(
                f"Prometheus at {self.url} answered {response.status_code} ({what})"
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise SourceError(
                f"Prometheus at {self.url} answered {response.status_code} "
                f"with no JSON ({what})"
            ) from exc
        if response.status_code != 200 or body.get("status") != "success":
            raise QueryError(
                str(body.get("error", response.text[:300])),
                error_type=str(body.get("errorType", "")),
                query=", ".join(matchers),
            )
        data: list[dict[str, str]] = body.get("data") or []
        return data


# --------------------------------------------------------------------------
# Raw reads


def _selector(names: Sequence[str], labels: str) -> str:
    if len(names) == 1:
        name_matcher = f'__name__="{names[0]}"'
    else:
        name_matcher = '__name__=~"' + "|".join(re.escape(n) for n in names) + '"'
    inner = ",".join(p for p in (name_matcher, labels.strip().strip(",")) if p)
    return "{" + inner + "}"


def _label_key(metric: dict[str, str]) -> LabelKey:
    return tuple(sorted(metric.items()))


@dataclass
class RawSeries:
    labels: dict[str, str]
    t: np.ndarray  # seconds
    v: np.ndarray


TOO_MANY = re.compile(r"too many samples|max-samples|exceeded", re.I)


class Reader:
    """Reads raw samples of a set of names, in budget-sized chunks."""

    def __init__(self, client: PrometheusClient, options: Options) -> None:
        self.client = client
        self.options = options
        self.config = client.config

    def plan(
        self, counts: dict[str, int], after_ms: int, until_ms: int
    ) -> list[tuple[list[str], int, int]]:
        """(names, after_ms, until_ms) requests for ``(after, until]``."""
        interval = self.options.scrape_interval_s
        longest = until_ms - after_ms
        # Names are packed so one request still covers at least an hour.
        per_hour = max(1, int(self.config.max_samples / (HOUR_S / interval + 1)))
        out: list[tuple[list[str], int, int]] = []
        for names in pack(counts, per_hour):
            series = sum(counts[n] for n in names)
            try:
                length = chunk_length_ms(
                    series=series,
                    interval_s=interval,
                    # +1: a closed range selector can return one edge sample more.
                    max_points=self.config.max_points - 1,
                    max_samples=self.config.max_samples - series,
                    longest_ms=longest,
                )
            except BudgetTooSmall as exc:
                raise SourceError(
                    f"PROMETHEUS_MAX_SAMPLES={self.config.max_samples} is too small "
                    f"for {', '.join(names)}: {exc}",
                    permanent=True,
                ) from exc
            if self.options.chunk_s:
                length = min(length, int(self.options.chunk_s * 1000))
            for c in chunks(after_ms, until_ms, length):
                out.append((names, c.after_ms, c.until_ms))
        return out

    def fetch_chunk(
        self, names: list[str], labels: str, after_ms: int, until_ms: int
    ) -> list[tuple[LabelKey, np.ndarray, np.ndarray]]:
        promql = f"{_selector(names, labels)}[{until_ms - after_ms}ms]"
        try:
            result = self.client.query_matrix(promql, until_ms)
        except QueryError as exc:
            # Our estimate assumed a scrape interval; a denser target is
            # caught here by Prometheus's own limit: halve and retry.
            span = until_ms - after_ms
            if TOO_MANY.search(str(exc)) and span > 2 * 1000:
                mid = after_ms + span // 2
                return self.fetch_chunk(
                    names, labels, after_ms, mid
                ) + self.fetch_chunk(names, labels, mid, until_ms)
            raise
        out = []
        after_s = after_ms / 1000
        for metric, t, v in result:
            keep = t > after_s  # (a, b]: the left edge belongs to the chunk before
            if keep.all():
                out.append((_label_key(metric), t, v))
            elif keep.any():
                out.append((_label_key(metric), t[keep], v[keep]))
        return out


def merge_chunks(
    results: Sequence[Sequence[tuple[LabelKey, np.ndarray, np.ndarray]]],
) -> list[RawSeries]:
    parts: dict[LabelKey, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for result in results:
        for key, t, v in result:
            parts[key].append((t, v))
    out = []
    for key in sorted(parts):
        t, v = merge_samples(parts[key])
        if t.size:
            out.append(RawSeries(dict(key), t, v))
    return out


# --------------------------------------------------------------------------
# From raw samples to hourly records (no I/O below this line)


@dataclass
class CounterState:
    """Last sample of each counter series, carried from one slice to the next."""

    last: dict[LabelKey, tuple[float, float]] = field(default_factory=dict)


def _hour(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _counter_hourly(
    s: RawSeries,
    *,
    state: CounterState,
    born: bool,
    slice_start_s: float,
) -> dict[int, float]:
    key = _label_key(s.labels)
    previous = state.last.get(key)
    t, v = s.t, s.v
    if previous is not None and previous[0] < t[0]:
        t = np.concatenate([[previous[0]], t])
        v = np.concatenate([[previous[1]], v])
        born = False
    hourly = hourly_counter_increases(t, v, born_in_window=born)
    state.last[key] = (float(s.t[-1]), float(s.v[-1]))
    return {h: x for h, x in hourly.items() if h >= slice_start_s}


def _preferred(
    series: list[RawSeries], table: EngineTable
) -> list[tuple[RawSeries, Any]]:
    """(series, role) pairs keeping, per replica and field, the newest name."""
    pairs = []
    best: dict[tuple[str, str, LabelKey], int] = {}
    for s in series:
        if not keeps_rank(s.labels, table=table):
            continue
        for role in table.roles_of(s.labels.get("__name__", "")):
            k = (role.kind, role.field, replica_key(s.labels, table=table))
            best[k] = min(best.get(k, role.preference), role.preference)
            pairs.append((s, role))
    return [
        (s, r)
        for s, r in pairs
        if best[(r.kind, r.field, replica_key(s.labels, table=table))] == r.preference
    ]


@dataclass
class DeploymentHours:
    records: list[Record]
    up_samples: dict[int, float]  # hour -> replica-seconds seen


def deployment_records(
    *,
    target: Target,
    series: list[RawSeries],
    born: Callable[[dict[str, str]], bool],
    state: CounterState,
    slice_start_s: float,
    slice_end_s: float,
    interval_default: float,
    device_seconds: dict[int, float] | None = None,
) -> list[Record]:
    """Hourly deployment and histogram records of one slice from raw samples."""
    table = ENGINES[target.engine]
    pairs = _preferred(series, table)
    interval = scrape_interval([s.t for s, _ in pairs], interval_default)

    counters: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    gauges: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    buckets: dict[str, dict[float, dict[int, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    hist_sum: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_count: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_hours: dict[str, set[int]] = defaultdict(set)
    samples: dict[int, int] = defaultdict(int)
    hours_seen: set[int] = set()
    counted: set[LabelKey] = set()

    hourly_by_key: dict[LabelKey, dict[int, float]] = {}
    for s, role in pairs:
        key = _label_key(s.labels)
        if key not in counted:
            counted.add(key)
            hours = (np.floor(s.t / HOUR_S) * HOUR_S).astype(np.int64)
            uniq, n = np.unique(hours, return_counts=True)
            for h, c in zip(uniq.tolist(), n.tolist(), strict=True):
                if slice_start_s <= h < slice_end_s:
                    samples[h] += c
                    hours_seen.add(h)
        if role.kind == "gauge":
            gauges[role.field].append((s.t, s.v * role.scale))
            continue
        if role.kind not in {"counter", "histogram"}:
            continue
        # A series with two roles (TGI's length-histogram sum is also its token
        # counter) is turned into increases once, then routed to both.
        if key not in hourly_by_key:
            hourly_by_key[key] = _counter_hourly(
                s, state=state, born=born(s.labels), slice_start_s=slice_start_s
            )
        hourly = hourly_by_key[key]
        if role.kind == "counter":
            name = role.field
            if name == "requests":
                reason = role.fixed_reason or s.labels.get("finished_reason", "")
                name = REASON_FIELDS.get(reason, ABORTED_FIELD)
            for h, x in hourly.items():
                counters[name][h] += x * role.scale
        elif role.part == "bucket":
            le_text = s.labels.get("le", "+Inf")
            le = math.inf if le_text in {"+Inf", "Inf", "inf"} else float(le_text)
            for h, x in hourly.items():
                buckets[role.field][le][h] += x
                hist_hours[role.field].add(h)
        elif role.part == "sum":
            for h, x in hourly.items():
                hist_sum[role.field][h] += x
        else:
            for h, x in hourly.items():
                hist_count[role.field][h] += x

    gauge_stats: dict[str, dict[int, tuple[float, float]]] = {}
    replicas: dict[int, tuple[float, float]] = {}
    for name, parts in gauges.items():
        times, sums, maxes, counts = slot_totals(parts, interval)
        if name == "kv_cache_usage":
            mean_stats = hourly_gauge_stats(times, sums / counts)
            max_stats = hourly_gauge_stats(times, maxes)
            gauge_stats[name] = {
                h: (mean_stats[h][0], max_stats[h][1]) for h in mean_stats
            }
        else:
            gauge_stats[name] = {
                h: (m, x) for h, (m, x, _) in hourly_gauge_stats(times, sums).items()
            }
        if name == table.up_field:
            stats = hourly_gauge_stats(times, counts)
            per_hour = HOUR_S / interval
            for hour, (mean, top, slots) in stats.items():
                # Replica-seconds seen, over the hour (a replica up for half of
                # the hour counts one half).
                replicas[hour] = (mean * slots / per_hour, top)

    records: list[Record] = []
    for h in sorted(hours_seen):
        reps_mean, reps_max = replicas.get(h, (0.0, 0.0))
        if device_seconds is not None:
            gpu_seconds = device_seconds.get(h, 0.0)
        else:
            gpu_seconds = reps_mean * HOUR_S * target.gpu_share

        def g(name: str, i: int, h: int = h) -> float | None:
            stat = gauge_stats.get(name, {}).get(h)
            return None if stat is None else stat[i]

        def c(name: str, h: int = h) -> float | None:
            return counters[name].get(h) if name in counters else None

        records.append(
            DeploymentHourRecord(
                deployment=target.name,
                hour=_hour(h),
                requests_stop=c("requests_stop") or 0.0,
                requests_length=c("requests_length") or 0.0,
                requests_aborted=c("requests_aborted") or 0.0,
                prompt_tokens=c("prompt_tokens") or 0.0,
                generation_tokens=c("generation_tokens") or 0.0,
                replicas_mean=reps_mean,
                replicas_max=reps_max,
                gpu_seconds=gpu_seconds,
                kv_cache_usage_mean=g("kv_cache_usage", 0),
                kv_cache_usage_max=g("kv_cache_usage", 1),
                running_mean=g("running", 0),
                running_max=g("running", 1),
                waiting_mean=g("waiting", 0),
                waiting_max=g("waiting", 1),
                preemptions=c("preemptions"),
                prefix_cache_queries=c("prefix_cache_queries"),
                prefix_cache_hits=c("prefix_cache_hits"),
                counts_exact=True,
                samples=samples[h],
            )
        )
        for metric in sorted(buckets):
            if h not in hist_hours[metric]:
                continue
            bounds = sorted(buckets[metric])
            records.append(
                HistogramRecord(
                    deployment=target.name,
                    hour=_hour(h),
                    metric=metric,
                    bounds=tuple(None if math.isinf(b) else b for b in bounds),
                    cumulative_counts=tuple(
                        buckets[metric][b].get(h, 0.0) for b in bounds
                    ),
                    total_sum=hist_sum[metric].get(h, 0.0),
                    total_count=hist_count[metric].get(h, 0.0),
                )
            )
    return records


def device_records(
    *,
    deployment: str | None,
    series: list[RawSeries],
    born: Callable[[dict[str, str]], bool],
    state: CounterState,
    slice_start_s: float,
    slice_end_s: float,
    interval_default: float,
) -> tuple[list[DeviceHourRecord], dict[int, float]]:
    """Per GPU or MIG instance and hour; and GPU-equivalent seconds per hour."""
    interval = scrape_interval([s.t for s in series], interval_default)
    per_device: dict[DeviceKey, dict[str, Any]] = defaultdict(dict)
    for s in series:
        name = s.labels.get("__name__", "")
        mapped = DCGM.get(name)
        if mapped is None:
            continue
        key = device_key(s.labels)
        if mapped.kind == "counter":
            hourly = _counter_hourly(
                s, state=state, born=born(s.labels), slice_start_s=slice_start_s
            )
            per_device[key][mapped.field] = {
                h: x * mapped.scale for h, x in hourly.items()
            }
        else:
            stats = hourly_gauge_stats(s.t, s.v * mapped.scale)
            per_device[key][mapped.field] = {
                h: m for h, (m, _, _) in stats.items() if h >= slice_start_s
            }
            if name == DCGM_UP:
                per_device[key]["_samples"] = {
                    h: n for h, (_, _, n) in stats.items() if h >= slice_start_s
                }
    records: list[DeviceHourRecord] = []
    gpu_seconds: dict[int, float] = defaultdict(float)
    for key in sorted(
        per_device, key=lambda k: (k.hostname, k.gpu_uuid, k.gpu_instance_id)
    ):
        values = per_device[key]
        hours = sorted({h for f, per in values.items() for h in per if h < slice_end_s})
        for h in hours:
            n = values.get("_samples", {}).get(h, 0)
            gpu_seconds[h] += n * interval * key.gpu_share
            records.append(
                DeviceHourRecord(
                    hostname=key.hostname,
                    gpu_uuid=key.gpu_uuid,
                    hour=_hour(h),
                    deployment=deployment,
                    gpu_index=key.gpu_index,
                    gpu_model=key.gpu_model,
                    mig_profile=key.mig_profile,
                    gpu_instance_id=key.gpu_instance_id,
                    samples=int(n),
                    **{
                        f: per.get(h)
                        for f, per in values.items()
                        if not f.startswith("_")
                    },
                )
            )
    return records, dict(gpu_seconds)


# --------------------------------------------------------------------------
# The source


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
        slices = len(self._slices(window))
        fleet = 1 if self.options.fleet_dcgm_selector else 0
        return 1 + slices * (len(self.targets) + fleet)

    def fetch(self, window: Window) -> Iterator[Batch]:
        slices = self._slices(window)
        start, end = slices[0][0], slices[-1][1]
        before = self.client.requests
        jobs, discovery = self.discover(start, end)
        yield Batch(
            records=list(discovery),
            steps=1,
            api_requests=self.client.requests - before,
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
            if target.dcgm_selector:
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
                    self.selector_errors.append(message)
                    error = "; ".join(p for p in (error, message) if p)
                    dcgm_found = []
                dcgm_names = sorted({s.get("__name__", "") for s in dcgm_found})
                for s in dcgm_found:
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
        built: list[list[Record]] = []
        for i, job in enumerate(all_jobs):
            main = merge_chunks([f.result() for f in reads[2 * i]])
            dcgm = merge_chunks([f.result() for f in reads[2 * i + 1]])
            records: list[Record] = []
            device_seconds = None
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
            built.append(records)
        for records in built:
            yield Batch(
                records=records,
                steps=1,
                api_requests=self.client.requests - before,
            )
            before = self.client.requests


# --------------------------------------------------------------------------
# Wiring


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


def source_from_run(run: Any) -> PrometheusSource:
    """run.params: {"deployments": [names] (default: all with a selector),
    "dcgm_selectors": {name: matchers} (default: each deployment's own
    ``dcgm_selector``), and any ``Options`` field}."""
    from costapp.models import Deployment

    params = dict(run.params or {})
    qs = Deployment.objects.all()
    names = params.get("deployments")
    if names:
        qs = qs.filter(name__in=names)
        missing = set(names) - set(qs.values_list("name", flat=True))
        if missing:
            raise SourceError(
                f"deployments not in the fleet: {', '.join(sorted(missing))}",
                permanent=True,
            )
    else:
        qs = qs.exclude(prometheus_selector="")
    config = PrometheusConfig.from_settings(**(params.get("config") or {}))
    return PrometheusSource(
        targets=targets_from_deployments(list(qs), params.get("dcgm_selectors")),
        config=config,
        options=options_from_params(params),
    )


def window_last_hours(now: datetime, hours: int) -> Window:
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return Window(end - timedelta(hours=hours), end)
