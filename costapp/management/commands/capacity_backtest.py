"""``manage.py capacity_backtest --deployment chat [--days 7] [--json] [--circular]``

Today's configuration of a deployment (as the what-if page builds it) against the
same deployment's hourly telemetry: mean ITL and output tokens/s per replica at
each hour's mean running batch, and a one-sided replica check (see
``analytics.capacity.backtest``). ``--circular`` says the telemetry was generated
from the engine itself (the demo), so agreement checks nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from analytics.capacity.backtest import Backtest, HourObservation, backtest_today
from analytics.capacity.errors import CapacityError
from analytics.histograms import BucketMismatch, Buckets, bucket_quantile
from costapp.capacity import selectors
from costapp.models import Deployment, DeploymentHour, HistogramHour


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _p95_ms(row: HistogramHour) -> float | None:
    try:
        value = bucket_quantile(
            0.95, Buckets(tuple(row.bounds), tuple(row.cumulative_counts))
        )
    except BucketMismatch:
        return None
    return None if value is None else value * 1000.0


def observations(
    deployment: Deployment, *, start: Any, end: Any
) -> tuple[list[HourObservation], float | None]:
    """Hourly observations and the window's prefix-cache hit rate (None: unknown)."""
    itl = {
        h.hour: h
        for h in HistogramHour.objects.filter(
            deployment=deployment, metric="itl", hour__gte=start, hour__lt=end
        )
    }
    hours: list[HourObservation] = []
    hits = queries = 0.0
    for row in DeploymentHour.objects.filter(
        deployment=deployment, hour__gte=start, hour__lt=end
    ).order_by("hour"):
        replicas = row.replicas_mean if row.replicas_mean > 0 else None
        requests = row.requests
        hist = itl.get(row.hour)
        if row.prefix_cache_queries and row.prefix_cache_hits is not None:
            hits += row.prefix_cache_hits
            queries += row.prefix_cache_queries
        hours.append(
            HourObservation(
                hour=row.hour.isoformat(),
                replicas=replicas,
                running_per_replica=row.running_mean / replicas
                if replicas and row.running_mean is not None
                else None,
                itl_sum_s=hist.total_sum if hist else None,
                itl_count=hist.total_count if hist else None,
                output_tokens_per_s_per_replica=row.generation_tokens / 3600 / replicas
                if replicas and row.generation_tokens > 0
                else None,
                requests_per_s=requests / 3600 if requests > 0 else None,
                itl_p95_ms=_p95_ms(hist) if hist else None,
                prompt_tokens_mean=row.prompt_tokens / requests
                if requests > 0
                else None,
                output_tokens_mean=row.generation_tokens / requests
                if requests > 0
                else None,
            )
        )
    return hours, (hits / queries if queries > 0 else None)


class Command(BaseCommand):
    help = "Back-test today's capacity prediction against the deployment's telemetry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", required=True)
        parser.add_argument("--days", type=int, default=7)
        parser.add_argument("--json", action="store_true", help="JSON on stdout")
        parser.add_argument(
            "--circular",
            action="store_true",
            help="the telemetry was generated from the capacity engine (demo)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            deployment = Deployment.objects.get(name=options["deployment"])
        except Deployment.DoesNotExist:
            raise CommandError(
                f"--deployment {options['deployment']!r}: no such deployment"
            ) from None
        if not 1 <= options["days"] <= 90:
            raise CommandError(f"--days {options['days']}: must be 1 to 90")
        now = timezone.now()
        state = selectors.deployment_today(deployment, now=now)
        if state.scenario is None:
            raise CommandError("; ".join(state.problems))
        hours, hit_rate = observations(
            deployment, start=now - timedelta(days=options["days"]), end=now
        )
        scenario = state.scenario
        if hit_rate is not None and 0 <= hit_rate < 1:
            scenario = replace(scenario, prefix_cache_hit_rate=hit_rate)
        try:
            found = backtest_today(
                scenario,
                hours,
                calibrations=selectors.stored_calibrations(),
                circular=options["circular"],
            )
        except CapacityError as exc:
            raise CommandError(f"today's configuration: {exc}") from None
        if options["json"]:
            self.stdout.write(json.dumps(_document(deployment, found), indent=2))
            return
        self._print(deployment, found)

    def _print(self, deployment: Deployment, found: Backtest) -> None:
        def pct(value: float | None) -> str:
            return "—" if value is None else f"{value:+.1%}"

        self.stdout.write(
            f"{deployment.name}: ITL {pct(found.itl_error)}, throughput "
            f"{pct(found.throughput_error)} (predicted vs observed; "
            f"calibration {found.calibration})"
        )
        self.stdout.write(
            "hour                        batch  ITL obs  ITL pred  tok/s obs  "
            "tok/s pred  replicas"
        )
        for h in found.hours:

            def num(value: float | None, digits: int = 1) -> str:
                return "—" if value is None else f"{value:.{digits}f}"

            replicas = (
                f"{num(h.replicas_observed, 0)} obs / {h.replicas_predicted} pred "
                f"({h.replicas_verdict})"
                if h.replicas_predicted is not None
                else h.replicas_verdict
            )
            self.stdout.write(
                f"{h.hour:<27} {num(h.batch):>6} {num(h.observed_itl_ms):>8} "
                f"{num(h.predicted_itl_ms):>9} {num(h.observed_tokens_per_s):>10} "
                f"{num(h.predicted_tokens_per_s):>11}  {replicas}"
            )
        for message in found.messages:
            self.stdout.write(message)


def _document(deployment: Deployment, found: Backtest) -> dict[str, Any]:
    return {
        "deployment": deployment.name,
        "itl_error": _clean(found.itl_error),
        "throughput_error": _clean(found.throughput_error),
        "itl_median_abs_error": _clean(found.itl_median_abs_error),
        "throughput_median_abs_error": _clean(found.throughput_median_abs_error),
        "large_error": found.large_error,
        "offer_telemetry_fit": found.offer_telemetry_fit,
        "replicas_ok": found.replicas_ok,
        "circular": found.circular,
        "calibration": found.calibration,
        "messages": list(found.messages),
        "hours": [{k: _clean(v) for k, v in h.__dict__.items()} for h in found.hours],
    }
