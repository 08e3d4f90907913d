"""/metrics: stored unit costs in the Prometheus text format, for Grafana and
Alertmanager.

A custom collector reads the stored figures at scrape time into a fresh
``CollectorRegistry``: gauges set inside Celery tasks would live in the
worker's process and the web process would show nothing. Authenticated by a
bearer token: a user's API token with the ``metrics`` scope (its user needs
the right to read unit costs), or the deployment-wide ``COSTAPP_METRICS_TOKEN``
compared in constant time. A request without a valid token gets 401, whether
or not any token exists (a 404 while none did told an anonymous caller so).

Per series (deployment, team, fleet) and currency, two clocks:

- ``clock="provisional"``: the last stored hour (GPU-hours x the learnt
  effective rate); alert on this one for fast, approximate signals;
- ``clock="final"`` or ``"estimated"``: the last day with a bill; alert on
  this one for money (``costapp_unit_cost_period_end_timestamp_seconds`` says
  which day it is, so a stale bill is visible and alertable).

Idle dollars (``IdleFigure``), both kinds (``kind="paid"``: GPU-hours paid
that no replica used; ``kind="headroom"``: serving below capacity at the
target utilisation), per deployment or pool for its last complete UTC day
(before the scrape's day), with ``costapp_idle_period_end_timestamp_seconds``
beside them as for the bill clock. A pool's own series has an empty
``deployment``; its members' series carry its name in ``pool``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Max, Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from costapp.api.tokens import api_token_authenticate
from costapp.days import utc_midnight
from costapp.models import Deployment, UnitCostFigure
from costapp.models.api import SCOPE_METRICS
from costapp.models.economics import IdleFigure
from costapp.pipeline.selectors import last_refreshes, pipeline_status

LABELS = ["deployment", "team", "clock", "currency"]
SCOPES = ("deployment", "team", "fleet")
GAUGES = (
    ("cost_per_1k_requests", "costapp_cost_per_1k_requests_dollars",
     "Cost per 1k finished requests"),
    ("cost_per_1m_tokens", "costapp_cost_per_1m_tokens_dollars",
     "Cost per 1M tokens (prompt + generation)"),
    ("baseline", "costapp_cost_per_1k_requests_baseline_dollars",
     "EWMA baseline of the cost per 1k requests"),
    ("lower", "costapp_cost_per_1k_requests_lower_dollars",
     "Lower edge of the baseline band"),
    ("upper", "costapp_cost_per_1k_requests_upper_dollars",
     "Upper edge of the baseline band"),
    ("baseline_per_1m_tokens", "costapp_cost_per_1m_tokens_baseline_dollars",
     "EWMA baseline of the cost per 1M tokens"),
    ("idle_cost", "costapp_unit_cost_idle_dollars",
     "Pool idle dollars included in the period's (fully loaded) cost"),
)  # fmt: skip
IDLE_LABELS = ["deployment", "pool", "team", "kind", "method", "currency"]


def latest_figures_read() -> list[UnitCostFigure]:
    """Per series and currency: the last closed hour (provisional), the last
    final bill day and the last estimated one. A period still in progress is
    left out: an alerting rule on it would page on a quarter of an hour."""
    wanted = Q(pk__in=[])
    base = UnitCostFigure.objects.filter(scope__in=SCOPES, complete=True)
    for grain, clock in (
        ("hour", "provisional"),
        ("day", "final"),
        ("day", "estimated"),
    ):
        latest = (
            base.filter(grain=grain, clock=clock)
            .values("scope", "name", "currency")
            .annotate(last=Max("period_start"))
        )
        for row in latest:
            wanted |= Q(
                scope=row["scope"], name=row["name"], currency=row["currency"],
                grain=grain, clock=clock, period_start=row["last"],
            )  # fmt: skip
    return list(base.filter(wanted).order_by("scope", "name", "grain"))


def latest_idle_read(*, today: date) -> list[IdleFigure]:
    """Per deployment or pool, kind and currency: the last stored day before
    ``today`` (UTC), whose 24 hours are over; a row whose dollars are unknown
    is still the last day (its sample is missing, its period end is not)."""
    wanted = Q(pk__in=[])
    latest = (
        IdleFigure.objects.filter(day__lt=today)
        .values("scope", "name", "kind", "currency")
        .annotate(last=Max("day"))
    )
    for row in latest:
        wanted |= Q(
            scope=row["scope"], name=row["name"], kind=row["kind"],
            currency=row["currency"], day=row["last"],
        )  # fmt: skip
    return list(IdleFigure.objects.filter(wanted).order_by("scope", "name", "kind"))


def idle_labels(f: IdleFigure, fleet: dict[str, tuple[str, str]]) -> list[str]:
    """deployment, pool, team, kind, method, currency of one idle figure;
    ``fleet`` maps a deployment to its (team, pool)."""
    if f.scope == "pool":
        return ["", f.name, "", f.kind, f.method, f.currency]
    team, pool = fleet.get(f.name, ("", ""))
    return [f.name, pool, team, f.kind, f.method, f.currency]


def _fleet_read() -> dict[str, tuple[str, str]]:
    return {
        name: (team, pool or "")
        for name, team, pool in Deployment.objects.values_list(
            "name", "team", "pool__name"
        )
    }


def _idle_families(now: datetime) -> Iterator[GaugeMetricFamily]:
    dollars = GaugeMetricFamily(
        "costapp_idle_dollars",
        "Idle dollars of the last complete UTC day (kind: paid, headroom)",
        labels=IDLE_LABELS,
    )
    gpu_hours = GaugeMetricFamily(
        "costapp_idle_gpu_hours",
        "Idle GPU-hours of the last complete UTC day (kind: paid, headroom)",
        labels=IDLE_LABELS,
    )
    period_end = GaugeMetricFamily(
        "costapp_idle_period_end_timestamp_seconds",
        "End of the UTC day the idle series of these labels describe",
        labels=IDLE_LABELS,
    )
    fleet = _fleet_read()
    today = now.astimezone(UTC).date()
    for f in latest_idle_read(today=today):
        labels = idle_labels(f, fleet)
        if f.amount is not None:  # unknown is missing, never 0
            dollars.add_metric(labels, float(f.amount))
        if f.gpu_hours is not None:
            gpu_hours.add_metric(labels, float(f.gpu_hours))
        end = utc_midnight(f.day + timedelta(days=1))
        period_end.add_metric(labels, end.timestamp())
    yield from (dollars, gpu_hours, period_end)


def pipeline_families(
    now: datetime,
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Watch the watcher: when each step last succeeded, how long it took,
    how long the data it consumed waited, how long data waits for it now,
    and when each source last stored data (docs/economics.md gives the
    alerting rules that page when the beat or a worker stops)."""
    success = GaugeMetricFamily(
        "costapp_pipeline_step_last_success_timestamp_seconds",
        "When the step last finished successfully",
        labels=["step"],
    )
    duration = GaugeMetricFamily(
        "costapp_pipeline_step_duration_seconds",
        "How long the step's last successful run took",
        labels=["step"],
    )
    lag = GaugeMetricFamily(
        "costapp_pipeline_step_lag_seconds",
        "From the arrival of the oldest data the step's last run consumed to "
        "its end (for unit_costs: the data-to-figure lag)",
        labels=["step"],
    )
    waiting = GaugeMetricFamily(
        "costapp_pipeline_step_waiting_seconds",
        "How long the oldest data not yet consumed by the step has waited (0: "
        "up to date)",
        labels=["step"],
    )
    failures = CounterMetricFamily(
        "costapp_pipeline_step_failures",
        "Runs of the step that failed (their work goes back to pending)",
        labels=["step"],
    )
    for s in pipeline_status(now=now):
        if s.last_success_at is not None:
            success.add_metric([s.name], s.last_success_at.timestamp())
        if s.last_duration_s is not None:
            duration.add_metric([s.name], s.last_duration_s)
        if s.last_lag_s is not None:
            lag.add_metric([s.name], s.last_lag_s)
        waited = (now - s.waiting_since).total_seconds() if s.waiting_since else 0.0
        waiting.add_metric([s.name], max(0.0, waited))
        failures.add_metric([s.name], float(s.failures))
    refreshed = GaugeMetricFamily(
        "costapp_source_last_data_timestamp_seconds",
        "When a run of the source last finished with data stored",
        labels=["source"],
    )
    for source, at in last_refreshes().items():
        if at is not None:
            refreshed.add_metric([source], at.timestamp())
    yield from (success, duration, lag, waiting, failures, refreshed)


class UnitCostCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        teams = dict(Deployment.objects.values_list("name", "team"))
        families = {
            field: GaugeMetricFamily(name, doc, labels=LABELS)
            for field, name, doc in GAUGES
        }
        period_end = GaugeMetricFamily(
            "costapp_unit_cost_period_end_timestamp_seconds",
            "End of the period the unit-cost series of this clock describe",
            labels=LABELS,
        )
        flagged = GaugeMetricFamily(
            "costapp_unit_cost_flagged",
            "1 when the period is outside its band (flag: anomaly, traffic, size)",
            labels=[*LABELS, "flag"],
        )
        for f in latest_figures_read():
            if f.scope == "deployment":
                labels = [f.name, teams.get(f.name, ""), f.clock, f.currency]
            elif f.scope == "team":
                labels = ["", f.name, f.clock, f.currency]
            else:
                labels = ["", "", f.clock, f.currency]
            for field, family in families.items():
                value = getattr(f, field)
                if value is not None:  # missing is missing: no sample, not 0
                    family.add_metric(labels, float(value))
            step = timedelta(hours=1) if f.grain == "hour" else timedelta(days=1)
            period_end.add_metric(labels, (f.period_start + step).timestamp())
            if f.flag:
                flagged.add_metric([*labels, f.flag], 1.0)
        yield from families.values()
        yield period_end
        yield flagged
        yield from _idle_families(timezone.now())
        yield from pipeline_families(timezone.now())


METRICS_RIGHT = "costapp.view_unitcostfigure"


def _verdict(request: HttpRequest, token: str) -> int:
    """200: let in; 401: no valid token; 403: a token whose user may not read
    unit costs."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    given = given.strip()
    now = timezone.now()
    if scheme.lower() == "bearer" and given:
        if token and hmac.compare_digest(given.encode(), token.encode()):
            return 200
        verdict = api_token_authenticate(secret=given, scope=SCOPE_METRICS, now=now)
        if verdict.token is not None:
            return 200 if verdict.token.user.has_perm(METRICS_RIGHT) else 403
    return 401


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    token = getattr(settings, "COSTAPP_METRICS_TOKEN", "")
    status = _verdict(request, token)
    if status == 403:
        return HttpResponse("this token's user may not read unit costs\n",
                            status=403, content_type="text/plain")  # fmt: skip
    if status == 401:
        response = HttpResponse("a bearer token is required\n", status=401,
                                content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="costapp metrics"'
        return response
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(UnitCostCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
