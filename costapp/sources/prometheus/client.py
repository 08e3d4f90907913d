"""HTTP to Prometheus: configuration, the session (auth, retries, TLS,
headers) and one translation of its errors into ``SourceError``/``QueryError``."""

from __future__ import annotations

import ast
import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3
from django.conf import settings
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from costapp.sources.base import SourceError
from costapp.sources.prometheus.matrix import Samples, matrix_from_json

logger = logging.getLogger(__name__)

MAX_POINTS = 11_000


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
    def from_settings(cls) -> PrometheusConfig:
        """The PROMETHEUS_* settings, and nothing else: the credentials and the
        bearer token go only to the configured URL (a run cannot override it)."""
        return cls(
            url=settings.PROMETHEUS_URL,
            username=settings.PROMETHEUS_USERNAME,
            password=settings.PROMETHEUS_PASSWORD,
            bearer_token=settings.PROMETHEUS_BEARER_TOKEN,
            ca_bundle=settings.PROMETHEUS_CA_BUNDLE,
            headers=dict(settings.PROMETHEUS_HEADERS),
            timeout_s=settings.PROMETHEUS_TIMEOUT_S,
            max_samples=settings.PROMETHEUS_MAX_SAMPLES,
            concurrency=settings.PROMETHEUS_CONCURRENCY,
            gzip=settings.PROMETHEUS_GZIP,
        )


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


def _whole_body(response: requests.Response) -> bytes:
    """The body of a ``stream=True`` response in one read.

    ``response.content`` gathers it through ``iter_content`` in 10 kB pieces:
    three times the CPU of one read for a 10 MB answer (docs/benchmarks.md).
    urllib3's errors are raised as requests' (``_transport`` words them).
    """
    try:
        # A response hook (the tests record every answer) may have read it.
        if response.raw is None or getattr(response, "_content_consumed", False):
            return response.content
        body: bytes = response.raw.read(decode_content=True)
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.Timeout(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise requests.ConnectionError(exc) from exc
    finally:
        response.close()
    return body


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
                stream=True,
            )
            body = _whole_body(response)
        except requests.RequestException as exc:
            raise self._transport(exc, f"query {promql[:120]}") from exc
        if response.status_code >= 500:
            raise SourceError(
                f"Prometheus at {self.url} answered HTTP Status Code "
                f"{response.status_code} ({body[:300]!r})"
            )
        if response.status_code != 200:
            try:
                answer = json.loads(body)
                error_type, text = (
                    str(answer.get("errorType", "")),
                    str(answer["error"]),
                )
            except (ValueError, KeyError, AttributeError):
                error_type, text = "", body[:300].decode("utf-8", "replace")
            raise QueryError(text, error_type=error_type, query=promql)
        try:
            return matrix_from_json(body)
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
