"""Back-test of "today": the engine's prediction against the same deployment's
telemetry, like with like.

* Hourly **mean** ITL (the histogram's sum ÷ count) against the predicted mean step
  time at that hour's mean running batch per replica: means against means,
  because a percentile cannot be rebuilt from a mean (percentiles come only
  through the simulation).
* Output tokens/s per replica against the predicted ``batch / mean ITL`` at that
  batch.
* Replicas, one-sided: if the observed p95 ITL met the SLA with N replicas, the
  predicted replica count for that hour's traffic must be ≤ N; the gap is
  headroom, not error. Hours that missed the SLA say nothing about the minimum.

More than 15% on ITL or throughput is a large error: the result says so and
offers the fit-from-telemetry calibration. Agreement on telemetry the demo took
from the engine itself is marked circular.

The telemetry is checked against itself first: over an hour, output tokens =
Σ per-step decoding batch, so tokens/s = time-mean running batch ÷ token-mean
ITL exactly, plus one first token per request, and less where running requests
are still in prefill (vLLM counts a request as running in its prefill step, so
with that step about one mean ITL long tokens/s = running ÷ mean ITL and the
ratio is about output ÷ (output + 1)). Telemetry above that bound
(``telemetry_ratio`` > 1.1)
cannot be right in both its running gauge and its ITL histogram, and no step
model can match its ITL and its throughput at once: the result says so, and
that neither the throughput error nor the replica check is evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity.calibration_types import Calibration
from analytics.capacity.engine import Scenario, StepModel, evaluate, step_model
from analytics.capacity.tail import TELEMETRY_PERCENTILE, percentile_itl_s

LARGE_ERROR = 0.15
# tokens/s above running / mean ITL (+ first tokens) by more than this is
# telemetry contradicting itself (counter and gauge scrape jitter stays well
# inside it).
CONSISTENCY_TOLERANCE = 0.10
# What ``telemetry_frame`` gives the decode fit and the tail fit, per hour.
TELEMETRY_COLUMNS = (
    "mean_running_batch", "itl_seconds", "itl_p95_seconds", "prompt_tokens",
    "output_tokens",
)  # fmt: skip


@dataclass(frozen=True)
class HourObservation:
    """One UTC hour of one deployment's telemetry (missing is None, never 0)."""

    hour: Any
    replicas: float | None
    running_per_replica: float | None  # mean vllm:num_requests_running per pod
    itl_sum_s: float | None  # vllm:inter_token_latency_seconds sum increase
    itl_count: float | None  # ... and count increase (tokens)
    output_tokens_per_s_per_replica: float | None = None
    requests_per_s: float | None = None
    itl_p95_ms: float | None = None  # from the histogram's buckets
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None


@dataclass(frozen=True)
class HourCheck:
    hour: Any
    batch: float | None
    observed_itl_ms: float | None
    predicted_itl_ms: float | None
    itl_error: float | None
    observed_tokens_per_s: float | None
    predicted_tokens_per_s: float | None
    throughput_error: float | None
    replicas_observed: float | None
    replicas_predicted: int | None
    sla_met: bool | None
    # "within" (predicted <= observed), "over" (predicted more than met the SLA),
    # "not checked" (SLA missed or data missing).
    replicas_verdict: str
    headroom_replicas: float | None
    # Observed output tokens/s / (running / observed mean ITL + requests/s):
    # at most 1 for telemetry that agrees with itself (see the module docstring).
    telemetry_ratio: float | None = None
    # The hour's p95 ITL and the closed form's at the hour's batch (the tail
    # that sizes replicas), when the percentile SLA is the telemetry's p95.
    observed_p95_ms: float | None = None
    predicted_p95_ms: float | None = None


@dataclass(frozen=True)
class Backtest:
    hours: tuple[HourCheck, ...]
    itl_error: float | None  # token-weighted: sum(pred x count) / sum(obs x count) - 1
    throughput_error: float | None  # sum(pred) / sum(obs) - 1 over hours with both
    itl_median_abs_error: float | None
    throughput_median_abs_error: float | None
    large_error: bool
    offer_telemetry_fit: bool
    replicas_ok: bool | None  # None: no hour met the SLA with known replicas
    circular: bool
    calibration: str
    messages: tuple[str, ...]
    # Window's sum(observed tokens/s) / sum(running / mean ITL + requests/s);
    # None without hours holding all four figures.
    telemetry_ratio: float | None = None
    telemetry_consistent: bool | None = None
    # Median of predicted / observed p95 ITL - 1 over the hours that met the
    # SLA (those the replica check reads); None without such hours.
    itl_p95_error: float | None = None

    def as_frame(self) -> pd.DataFrame:
        return pd.DataFrame([h.__dict__ for h in self.hours])


def _missing(*values: float | None) -> bool:
    return any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)


def predicted_itl_s(model: StepModel, scenario: Scenario, batch: float) -> float:
    """Mean ITL at ``batch`` as the engine computes it: the decode step plus the
    prefill work that shares the steps (B / output requests' prompts per step)."""
    prompt = float(scenario.prompt_tokens)
    output = float(scenario.output_tokens)
    cached = prompt * float(scenario.prefix_cache_hit_rate or 0.0)
    step = model.decode_step_s(batch, prompt + output / 2.0)
    prefill = model.prefill_work_s(max(prompt - cached, 1.0), cached)
    return step + batch * prefill / output


def backtest_today(
    scenario: Scenario,
    hours: Sequence[HourObservation],
    *,
    calibrations: Sequence[Calibration] = (),
    circular: bool = False,
    large_error: float = LARGE_ERROR,
) -> Backtest:
    """Compare ``scenario`` (today's configuration) with its hourly telemetry.

    ``circular`` says the telemetry was generated from this engine (the demo):
    agreement then proves nothing and the messages say so.
    """
    base = evaluate(scenario, calibrations=calibrations)
    # The step model's constants (bandwidth, FLOP/s, weights, KV bytes, blocks)
    # do not depend on the request shape, which enters through
    # ``predicted_itl_s``: one resolve for every hour, not one per hour.
    model = step_model(scenario, calibrations=calibrations)
    checks: list[HourCheck] = []
    for obs in hours:
        shaped = scenario
        if not _missing(obs.prompt_tokens_mean, obs.output_tokens_mean):
            shaped = replace(
                scenario,
                prompt_tokens=max(1, round(float(obs.prompt_tokens_mean or 1))),
                output_tokens=max(1, round(float(obs.output_tokens_mean or 1))),
            )
        batch = obs.running_per_replica
        observed_itl = (
            None
            if _missing(obs.itl_sum_s, obs.itl_count) or not (obs.itl_count or 0) > 0
            else float(obs.itl_sum_s or 0.0) / float(obs.itl_count or 1.0)
        )
        predicted_itl = (
            None
            if _missing(batch) or not (batch or 0) > 0
            else predicted_itl_s(model, shaped, float(batch or 0.0))
        )
        dp = float(scenario.data_parallel_size or 1)
        predicted_tps = (
            None
            if predicted_itl is None or _missing(batch)
            else float(batch or 0.0) / predicted_itl * dp
        )
        observed_tps = obs.output_tokens_per_s_per_replica
        sla_met = (
            None
            if _missing(obs.itl_p95_ms)
            else float(obs.itl_p95_ms or 0.0) <= scenario.itl_sla_ms
        )
        replicas_predicted: int | None = None
        if not _missing(obs.requests_per_s) and base.max_requests_per_s_within_sla > 0:
            replicas_predicted = max(
                1,
                math.ceil(
                    float(obs.requests_per_s or 0.0)
                    / base.max_requests_per_s_within_sla
                ),
            )
        ratio = None
        if observed_itl and not _missing(
            batch, observed_tps, obs.requests_per_s, obs.replicas
        ):
            first = float(obs.requests_per_s or 0.0) / float(obs.replicas or 1.0)
            bound = float(batch or 0.0) / observed_itl + first
            if bound > 0:
                ratio = float(observed_tps or 0.0) / bound
        predicted_p95 = None
        if (
            predicted_itl is not None
            and abs(float(scenario.sla_percentile) - TELEMETRY_PERCENTILE) < 1e-9
        ):
            predicted_p95 = percentile_itl_s(model, shaped, float(batch or 0.0))
        verdict, headroom = "not checked", None
        if sla_met and replicas_predicted is not None and not _missing(obs.replicas):
            n = float(obs.replicas or 0.0)
            headroom = n - replicas_predicted
            verdict = "within" if replicas_predicted <= n else "over"
        checks.append(
            HourCheck(
                hour=obs.hour,
                batch=None if _missing(batch) else float(batch or 0.0),
                observed_itl_ms=None if observed_itl is None else observed_itl * 1e3,
                predicted_itl_ms=None if predicted_itl is None else predicted_itl * 1e3,
                itl_error=_error(predicted_itl, observed_itl),
                observed_tokens_per_s=None if _missing(observed_tps) else observed_tps,
                predicted_tokens_per_s=predicted_tps,
                throughput_error=_error(
                    predicted_tps, None if _missing(observed_tps) else observed_tps
                ),
                replicas_observed=None if _missing(obs.replicas) else obs.replicas,
                replicas_predicted=replicas_predicted,
                sla_met=sla_met,
                replicas_verdict=verdict,
                headroom_replicas=headroom,
                telemetry_ratio=ratio,
                observed_p95_ms=None
                if _missing(obs.itl_p95_ms)
                else float(obs.itl_p95_ms or 0.0),
                predicted_p95_ms=None if predicted_p95 is None else predicted_p95 * 1e3,
            )
        )
    found = _summarise(
        checks,
        hours,
        base.calibration.label,
        circular=circular,
        large_error=large_error,
    )
    if found.replicas_ok is False:
        stalls = _stall_bound(scenario, base)
        if stalls:
            found = replace(found, messages=(*found.messages, stalls))
    return found


def _stall_bound(scenario: Scenario, base: Any) -> str | None:
    """Why a replica carries no more within the SLA, when prefill stalls set it:
    above ``output x (1 - percentile)`` running requests, more than that share
    of the ITL samples fall in steps carrying a prefill."""
    q = float(scenario.sla_percentile)
    cliff = float(scenario.output_tokens) * (1.0 - q)
    batch = float(base.batch_size)
    room = min(float(base.max_concurrency), float(base.max_num_seqs))
    if not (batch > 0 and batch <= cliff < batch + 1 and batch < room):
        return None
    return (
        f"capacity per replica within the SLA ({base.max_requests_per_s_within_sla:.2f}"
        f" req/s at a batch of {batch:.0f}) is set by prefill stalls: above "
        f"{cliff:.1f} running requests ({1 - q:.0%} of {scenario.output_tokens} "
        f"output tokens) more than {1 - q:.0%} of ITL samples fall in steps that "
        f"carry a prompt's prefill ({base.prefill_ms:.0f} ms; with the decode "
        f"step over the {scenario.itl_sla_ms:g} ms SLA); telemetry whose "
        f"p{q * 100:.0f} ITL has "
        "no such tail meets the SLA at a higher load"
    )


def _error(predicted: float | None, observed: float | None) -> float | None:
    if predicted is None or observed is None or not observed > 0:
        return None
    return predicted / observed - 1.0


def _summarise(
    checks: list[HourCheck],
    hours: Sequence[HourObservation],
    label: str,
    *,
    circular: bool,
    large_error: float,
) -> Backtest:
    pred_w = obs_w = 0.0
    for check, obs in zip(checks, hours, strict=True):
        if check.itl_error is not None and obs.itl_count:
            pred_w += (check.predicted_itl_ms or 0.0) * float(obs.itl_count)
            obs_w += (check.observed_itl_ms or 0.0) * float(obs.itl_count)
    itl_error = pred_w / obs_w - 1.0 if obs_w > 0 else None
    both = [c for c in checks if c.throughput_error is not None]
    observed_sum = sum(c.observed_tokens_per_s or 0.0 for c in both)
    tps_error = (
        sum(c.predicted_tokens_per_s or 0.0 for c in both) / observed_sum - 1.0
        if observed_sum > 0
        else None
    )
    itl_abs = [abs(c.itl_error) for c in checks if c.itl_error is not None]
    tps_abs = [abs(c.throughput_error) for c in both if c.throughput_error is not None]
    large = any(e is not None and abs(e) > large_error for e in (itl_error, tps_error))
    checked = [c for c in checks if c.replicas_verdict != "not checked"]
    replicas_ok = (
        all(c.replicas_verdict == "within" for c in checked) if checked else None
    )
    rated = [c for c in checks if c.telemetry_ratio]
    bound_sum = sum(
        (c.observed_tokens_per_s or 0.0) / (c.telemetry_ratio or 1.0) for c in rated
    )
    telemetry_ratio = (
        sum(c.observed_tokens_per_s or 0.0 for c in rated) / bound_sum
        if bound_sum > 0
        else None
    )
    consistent = (
        None
        if telemetry_ratio is None
        else telemetry_ratio <= 1.0 + CONSISTENCY_TOLERANCE
    )
    p95_errors = [
        (c.predicted_p95_ms or 0.0) / (c.observed_p95_ms or 1.0) - 1.0
        for c in checked
        if c.predicted_p95_ms is not None and (c.observed_p95_ms or 0.0) > 0
    ]
    p95_error = float(np.median(p95_errors)) if p95_errors else None
    messages: list[str] = []
    if consistent is False:
        over = sum(1 for c in checks if c.replicas_verdict == "over")
        messages.append(
            f"telemetry inconsistent: output tokens/s per replica is "
            f"{telemetry_ratio:.2f}x what its running batch and mean ITL allow "
            "(running / mean ITL, plus one first token per request; each running "
            "sequence makes at most one token per step), so the running gauge "
            "undercounts or the ITL histogram overstates. No step model can match "
            "this telemetry's ITL and its throughput at once, so neither the "
            "throughput error nor the replica check"
            + (f" ({over} hours over)" if over else "")
            + " says whether the engine is wrong: the telemetry must be fixed first"
        )
    if itl_error is None:
        messages.append(
            "no hour with both ITL and running-batch telemetry: nothing to compare"
        )
    if large:
        parts = [
            f"{name} {value:+.0%}"
            for name, value in (("ITL", itl_error), ("throughput", tps_error))
            if value is not None and abs(value) > large_error
        ]
        messages.append(
            "large error (more than "
            f"{large_error:.0%}): {', '.join(parts)} against telemetry; fit a "
            "calibration from this deployment's telemetry"
        )
    for c in checked:
        if c.replicas_verdict == "over":
            messages.append(
                f"{c.hour}: predicted {c.replicas_predicted} replicas where "
                f"{c.replicas_observed:g} met the ITL SLA"
            )
    tail_off = (
        replicas_ok is False
        and consistent is not False
        and p95_error is not None
        and abs(p95_error) > large_error
    )
    if tail_off:
        worst = max(
            (c for c in checked if c.predicted_p95_ms and c.observed_p95_ms),
            key=lambda c: (c.predicted_p95_ms or 0.0) / (c.observed_p95_ms or 1.0),
        )
        messages.append(
            "the model disagrees on the ITL tail: at the hours that met the SLA "
            f"the closed form's p95 ITL is {p95_error:+.0%} off the observed p95 "
            f"(median; {worst.hour}: {worst.predicted_p95_ms:.1f} ms predicted at "
            f"a batch of {worst.batch or 0.0:.1f} against "
            f"{worst.observed_p95_ms:.1f} ms observed), so the replicas it sizes "
            "are not this deployment's; fit the tail from its telemetry"
        )
    if circular:
        messages.append(
            "circular: this telemetry was generated from the capacity engine, so "
            "agreement with it checks nothing"
        )
    return Backtest(
        hours=tuple(checks),
        itl_error=itl_error,
        throughput_error=tps_error,
        itl_median_abs_error=float(np.median(itl_abs)) if itl_abs else None,
        throughput_median_abs_error=float(np.median(tps_abs)) if tps_abs else None,
        large_error=large,
        offer_telemetry_fit=(large or tail_off) and not circular,
        replicas_ok=replicas_ok,
        circular=circular,
        calibration=label,
        messages=tuple(messages),
        telemetry_ratio=telemetry_ratio,
        telemetry_consistent=consistent,
        itl_p95_error=p95_error,
    )


def telemetry_frame(hours: Sequence[HourObservation]) -> pd.DataFrame:
    """The rows ``fit_from_telemetry`` (mean running batch, mean ITL) and
    ``tail.fit_tail`` (also the p95 ITL and the hour's request shape) take."""
    rows = []
    for obs in hours:
        if _missing(obs.running_per_replica, obs.itl_sum_s, obs.itl_count):
            continue
        if not (obs.itl_count or 0) > 0:
            continue
        rows.append(
            {
                "mean_running_batch": float(obs.running_per_replica or 0.0),
                "itl_seconds": float(obs.itl_sum_s or 0.0)
                / float(obs.itl_count or 1.0),
                "itl_p95_seconds": math.nan
                if _missing(obs.itl_p95_ms)
                else float(obs.itl_p95_ms or 0.0) / 1e3,
                "prompt_tokens": math.nan
                if _missing(obs.prompt_tokens_mean)
                else float(obs.prompt_tokens_mean or 0.0),
                "output_tokens": math.nan
                if _missing(obs.output_tokens_mean)
                else float(obs.output_tokens_mean or 0.0),
            }
        )
    return pd.DataFrame(rows, columns=list(TELEMETRY_COLUMNS))
