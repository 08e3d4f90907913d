"""The back-test of "today" and what it reads: one code path for the what-if
page and ``manage.py capacity_backtest``.

Today's configuration (as the what-if page builds it) against the same
deployment's hourly telemetry, like with like (``analytics.capacity.backtest``):
hourly mean ITL (histogram sum / count) against the predicted step time at the
hourly mean running batch per replica, tokens/s per replica at that batch, and
a one-sided replica check. Also here: the prompt-token histogram the rejected
share is read from, and the telemetry fit that the back-test offers when its
error is large (the write is ``services.calibration_fit_telemetry``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from analytics.capacity.backtest import (
    Backtest,
    HourObservation,
    backtest_today,
    telemetry_frame,
)
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.calibration_types import CalibrationKey
from analytics.capacity.engine import Scenario, evaluate, step_model
from analytics.capacity.errors import CapacityError
from analytics.capacity.refusals import RejectedShare, rejected_share
from analytics.capacity.tail import fit_telemetry
from analytics.errors import InvalidInput
from analytics.histograms import BucketMismatch, Buckets, bucket_quantile, buckets_sum
from costapp.capacity import selectors
from costapp.models import Deployment, DeploymentHour, HistogramHour

WINDOW_DAYS = 7
MAX_WINDOW_DAYS = 90
# What the back-test compares: telemetry of these figures generated from the
# capacity engine would make agreement circular.
BACKTEST_FIGURES = frozenset({"itl", "running", "generation_tokens"})


def _p95_ms(row: HistogramHour) -> float | None:
    try:
        value = bucket_quantile(
            0.95, Buckets(tuple(row.bounds), tuple(row.cumulative_counts))
        )
    except BucketMismatch:
        return None
    return None if value is None else value * 1000.0


def observations(
    deployment: Deployment, *, start: datetime, end: datetime
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
        replicas = row.replicas_mean if row.replicas_mean else None
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


@dataclass(frozen=True)
class PromptHistogram:
    """Requests per prompt-length bucket over the window (not cumulative)."""

    upper_edges: tuple[float, ...]  # the last may be +inf
    counts: tuple[float, ...]

    def rejected(
        self, max_model_len: int, output_tokens: float
    ) -> RejectedShare | None:
        return rejected_share(
            upper_edges=self.upper_edges,
            counts=self.counts,
            max_model_len=max_model_len,
            output_tokens=output_tokens,
        )


def prompt_histogram(
    deployment: Deployment, *, start: datetime, end: datetime
) -> PromptHistogram | None:
    """``vllm:request_prompt_tokens`` summed over the window; None when there is
    none (or its bounds changed within the window, so it cannot be added)."""
    rows = HistogramHour.objects.filter(
        deployment=deployment, metric="prompt_tokens", hour__gte=start, hour__lt=end
    ).values_list("bounds", "cumulative_counts")
    try:
        summed = buckets_sum(rows)
    except BucketMismatch:
        return None
    if summed is None or not summed.count > 0:
        return None
    edges = tuple(float("inf") if b is None else float(b) for b in summed.bounds)
    cumulative = summed.cumulative
    counts = tuple(
        max(0.0, c - (cumulative[i - 1] if i else 0.0))
        for i, c in enumerate(cumulative)
    )
    return PromptHistogram(edges, counts)


@dataclass(frozen=True)
class DeploymentBacktest:
    deployment: Deployment
    scenario: Scenario | None  # today's, with the window's prefix-cache hit rate
    backtest: Backtest | None  # None: today could not be evaluated (see problems)
    hours: tuple[HourObservation, ...]
    hit_rate: float | None
    days: int
    engine_figures: frozenset[str]  # figures of this telemetry taken from the engine
    problems: tuple[str, ...] = ()

    @property
    def hours_compared(self) -> int:
        if self.backtest is None:
            return 0
        return sum(1 for h in self.backtest.hours if h.itl_error is not None)


def _window(now: datetime | None, days: int) -> tuple[datetime, datetime]:
    if not 1 <= days <= MAX_WINDOW_DAYS:
        raise InvalidInput("days", days, f"must be 1 to {MAX_WINDOW_DAYS}")
    end = now or timezone.now()
    return end - timedelta(days=days), end


def deployment_backtest(
    deployment: Deployment,
    *,
    now: datetime | None = None,
    days: int = WINDOW_DAYS,
    circular: bool | None = None,
    calibrations: Sequence[EngineCalibration] | None = None,
    today: selectors.Today | None = None,
) -> DeploymentBacktest:
    """Today's prediction against the last ``days`` of telemetry.

    ``circular`` None means: circular when the compared figures were generated
    from the engine (the demo declares which ones it took from it).
    """
    start, end = _window(now, days)
    state = today or selectors.deployment_today(deployment, now=end)
    figures = state.engine_figures
    if circular is None:
        circular = bool(figures & BACKTEST_FIGURES)
    hours, hit_rate = observations(deployment, start=start, end=end)
    scenario = state.scenario
    if scenario is None:
        return DeploymentBacktest(
            deployment,
            None,
            None,
            tuple(hours),
            hit_rate,
            days,
            figures,
            state.problems,
        )
    if (
        hit_rate is not None
        and 0 <= hit_rate < 1
        and "prefix_cache_hit_rate" not in state.settings
    ):
        # Today carries the last week's hit rate already; a back-test over
        # another window of a today without one takes this window's.
        scenario = replace(scenario, prefix_cache_hit_rate=hit_rate)
    cals = selectors.stored_calibrations() if calibrations is None else calibrations
    try:
        found = backtest_today(scenario, hours, calibrations=cals, circular=circular)
    except (CapacityError, InvalidInput) as exc:
        return DeploymentBacktest(
            deployment,
            scenario,
            None,
            tuple(hours),
            hit_rate,
            days,
            figures,
            (f"today's configuration: {exc}",),
        )
    return DeploymentBacktest(
        deployment, scenario, found, tuple(hours), hit_rate, days, figures
    )


def _shape(hours: Sequence[HourObservation]) -> tuple[float, float] | None:
    """Token-weighted mean prompt and output length over the hours."""
    prompt = output = requests = 0.0
    for h in hours:
        if h.requests_per_s is None or h.prompt_tokens_mean is None:
            continue
        n = h.requests_per_s * 3600
        prompt += (h.prompt_tokens_mean or 0.0) * n
        output += (h.output_tokens_mean or 0.0) * n
        requests += n
    if not requests > 0 or not output > 0:
        return None
    return prompt / requests, output / requests


def telemetry_fit(
    deployment: Deployment,
    *,
    now: datetime | None = None,
    days: int = WINDOW_DAYS,
) -> EngineCalibration:
    """A calibration fitted to this deployment's hourly telemetry: the decode
    step (ITL against running batch) and the ITL tail (hourly p95 against the
    closed form's at the same batch), ``analytics.capacity.tail.fit_telemetry``.

    Keyed to today's GPU, MIG profile, model, dtypes, TP and engine version, so
    the what-if page and the back-test pick it. The prefill share of the steps
    is taken out at the uncached prompt length (prefix-cache hits skip it).
    Where the decode fit is refused the decode step in effect (the stored
    calibration today uses, or the roofline) is kept and the tail is fitted
    against it. Raises ``CapacityError`` (``CalibrationRefused``: too few
    hours, too flat, no p95) naming the field and the value.
    """
    found = deployment_backtest(deployment, now=now, days=days, calibrations=())
    scenario = found.scenario
    if scenario is None:
        raise CapacityError("; ".join(found.problems) or "no configuration for today")
    shape = _shape(found.hours)
    if shape is not None:
        scenario = replace(
            scenario,
            prompt_tokens=max(1, round(shape[0])),
            output_tokens=max(1, round(shape[1])),
        )
    key = CalibrationKey(
        gpu=scenario.gpu,
        model=str(getattr(scenario.model, "name", scenario.model)),
        weight_dtype=scenario.weight_dtype,
        kv_dtype=scenario.kv_dtype,
        tp=int(scenario.tp),
        engine_version=scenario.engine_version,
        mig_profile=scenario.mig_profile or None,
    )
    stored = selectors.stored_calibrations()
    return fit_telemetry(
        telemetry_frame(found.hours),
        key=key,
        scenario=scenario,
        current=step_model(scenario, calibrations=stored),
        current_label=evaluate(scenario, calibrations=stored).calibration.label,
    )


def document(found: DeploymentBacktest) -> dict[str, Any]:
    """The command's ``--json`` document."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    bt = found.backtest
    if bt is None:
        return {"deployment": found.deployment.name, "problems": list(found.problems)}
    return {
        "deployment": found.deployment.name,
        "days": found.days,
        "itl_error": clean(bt.itl_error),
        "throughput_error": clean(bt.throughput_error),
        "itl_p95_error": clean(bt.itl_p95_error),
        "itl_median_abs_error": clean(bt.itl_median_abs_error),
        "throughput_median_abs_error": clean(bt.throughput_median_abs_error),
        "large_error": bt.large_error,
        "offer_telemetry_fit": bt.offer_telemetry_fit,
        "replicas_ok": bt.replicas_ok,
        "telemetry_ratio": clean(bt.telemetry_ratio),
        "telemetry_consistent": bt.telemetry_consistent,
        "circular": bt.circular,
        "engine_figures": sorted(found.engine_figures),
        "calibration": bt.calibration,
        "prefix_cache_hit_rate": clean(found.hit_rate),
        "messages": list(bt.messages),
        "hours": [{k: clean(v) for k, v in h.__dict__.items()} for h in bt.hours],
    }
