"""The ITL tail: the closed form's percentile ITL at a given batch, and its fit
from a deployment's own hourly p95 and mean ITL.

The closed form (``latency.percentile_itl_s``) puts the percentile ITL in a
step that carries a prefill chunk once more than ``1 - percentile`` of the
steps carry one (``B / output x chunks per request`` of them): the decode step
plus ``stall_fraction`` x the chunk's compute time. Below that threshold it is
``itl_percentile_factor`` x the mean ITL. vLLM's chunked prefill runs a chunk and
the decodes in one step, so the default is the whole chunk (1.0) and a spread of
1.0; public ``vllm bench serve`` runs show that tail (docs/capacity.md, "The ITL
tail").

A deployment's telemetry can show a different tail: prefill spread thinner over
the steps, prompts of varied length, prefill on other workers, or (the demo) no
stalls at all. ``fit_tail`` fits both numbers so that the closed form's p95 at
each hour's batch matches the hour's p95 (like with like, as the replica check
needs), against the mean ITL the engine predicts at that batch under the
calibration in effect:

* ``itl_percentile_factor``: the median of observed p95 / predicted mean over
  the hours below the stall threshold (at least ``MIN_SIDE_HOURS`` of them;
  else 1.0, not fitted);
* ``stall_fraction``: the median of (observed p95 - predicted decode step) /
  chunk over the hours above it (clipped at 0: a p95 under the decode step
  shows no stall); with too few hours above the threshold it stays 1.0, since
  nothing in the telemetry says how large a stall would be.

Bounds and refusals name the field and the value (``CalibrationRefused``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analytics.capacity import latency as lat
from analytics.capacity.calibration_fit import fit_errors, fit_from_telemetry
from analytics.capacity.calibration_io import CalibrationRefused
from analytics.capacity.calibration_types import (
    ENGINE_MEASUREMENTS,
    Calibration,
    CalibrationKey,
    FitQuality,
)
from analytics.capacity.latency import LatencyParams, StepModel
from analytics.capacity.scenario import Scenario
from analytics.errors import InvalidInput

# The percentile the telemetry carries (HourObservation.itl_p95_ms).
TELEMETRY_PERCENTILE = 0.95
MIN_HOURS = 6
# Each side of the stall threshold needs this many hours to set its number.
MIN_SIDE_HOURS = 3
# p95 over the mean of a lognormal with sigma 1 is 3.6; beyond 10 the hours'
# p95 is not a spread around their mean.
MAX_FACTOR = 10.0
# A stall of 5 modelled chunks: prompts in the tail of the length distribution
# can be several times the mean (public runs show 2-4x); more is not a stall.
MAX_STALL = 5.0


@dataclass(frozen=True)
class TailTerms:
    """The closed form's ITL pieces at one batch and request shape (seconds)."""

    decode_step_s: float
    mean_itl_s: float
    chunk_s: float
    share_with_prefill: float  # of the steps, at this batch
    threshold_batch: float  # batch above which more than 1 - q of steps stall


def tail_terms(
    model: StepModel, scenario: Scenario, batch: float, percentile: float
) -> TailTerms:
    """As ``engine._core`` computes them for ``scenario``'s request shape."""
    prompt = float(scenario.prompt_tokens)
    output = float(scenario.output_tokens)
    cached = prompt * float(scenario.prefix_cache_hit_rate or 0.0)
    computed = max(prompt - cached, 1.0)
    work = model.prefill_work_s(computed, cached)
    chunk = max(min(computed, float(model.max_num_batched_tokens)), 1.0)
    chunks = math.ceil(computed / chunk)
    step = model.decode_step_s(batch, prompt + output / 2.0)
    return TailTerms(
        decode_step_s=step,
        mean_itl_s=step + batch * work / output,
        chunk_s=chunk * work / computed,
        share_with_prefill=min(1.0, batch / output * chunks),
        threshold_batch=(1.0 - percentile) * output / chunks,
    )


def percentile_itl_s(
    model: StepModel,
    scenario: Scenario,
    batch: float,
    *,
    percentile: float | None = None,
) -> float:
    """The closed form's percentile ITL at ``batch`` with ``model``'s tail."""
    q = float(scenario.sla_percentile if percentile is None else percentile)
    t = tail_terms(model, scenario, batch, q)
    return float(
        lat.percentile_itl_s(
            np.asarray(t.decode_step_s),
            np.asarray(t.mean_itl_s),
            chunk_s=np.asarray(t.chunk_s),
            share_with_prefill=np.asarray(t.share_with_prefill),
            percentile=q,
            factor=model.itl_percentile_factor,
            stall=model.stall_fraction,
        )
    )


@dataclass(frozen=True)
class TailFit:
    itl_percentile_factor: float
    stall_fraction: float
    n_points: int
    hours_below: int  # hours under the stall threshold (they set the factor)
    hours_above: int  # hours over it (they set the stall)
    factor_fitted: bool
    stall_fitted: bool
    observed_ratio: float  # median observed p95 / observed mean ITL
    mape: float  # closed-form p95 against observed p95, over the hours
    r2: float | None
    method: str


def _shaped(scenario: Scenario, row: pd.Series) -> Scenario:
    prompt, output = row.get("prompt_tokens"), row.get("output_tokens")
    if prompt is None or output is None or pd.isna(prompt) or pd.isna(output):
        return scenario
    return replace(
        scenario,
        prompt_tokens=max(1, round(float(prompt))),
        output_tokens=max(1, round(float(output))),
    )


def fit_tail(
    hourly: pd.DataFrame,
    *,
    model: StepModel,
    scenario: Scenario,
    percentile: float = TELEMETRY_PERCENTILE,
    min_points: int = MIN_HOURS,
) -> TailFit:
    """Fit ``itl_percentile_factor`` and ``stall_fraction`` to hourly telemetry.

    ``hourly`` has ``mean_running_batch``, ``itl_seconds`` (mean ITL) and
    ``itl_p95_seconds``, optionally ``prompt_tokens`` and ``output_tokens`` (the
    hour's request shape; else ``scenario``'s). ``model`` carries the decode
    step the engine uses (the calibration in effect, or a decode fit just made),
    so the tail is fitted against the same mean ITL that sizing will use.
    """
    for column in ("mean_running_batch", "itl_seconds", "itl_p95_seconds"):
        if column not in hourly:
            raise InvalidInput(f"telemetry.{column}", None, "missing column")
    if abs(float(scenario.sla_percentile) - percentile) > 1e-9:
        raise CalibrationRefused(
            "scenario.sla_percentile",
            scenario.sla_percentile,
            f"the telemetry carries the p{percentile * 100:g} ITL; a tail fitted "
            "there does not size an SLA at another percentile",
        )
    data = hourly[
        (hourly["mean_running_batch"] > 0) & (hourly["itl_seconds"] > 0)
    ].dropna(subset=["mean_running_batch", "itl_seconds"])
    with_p95 = data.dropna(subset=["itl_p95_seconds"])
    with_p95 = with_p95[with_p95["itl_p95_seconds"] > 0]
    if with_p95.empty:
        raise CalibrationRefused(
            "telemetry.itl_p95_ms",
            None,
            f"no hour with traffic has a p95 ITL (from the ITL histogram's "
            f"buckets), so the tail cannot be fitted ({len(data)} hours with a "
            "mean ITL)",
        )
    if len(with_p95) < min_points:
        raise CalibrationRefused(
            "telemetry.rows",
            len(with_p95),
            f"need at least {min_points} hours with traffic and a p95 ITL to fit "
            "the tail",
        )
    observed_ratio = float(
        np.median(with_p95["itl_p95_seconds"] / with_p95["itl_seconds"])
    )
    if observed_ratio < 1.0:
        raise CalibrationRefused(
            "telemetry.itl_p95_ms",
            f"median {observed_ratio:.2f} x the hour's mean ITL",
            "a p95 ITL below the mean ITL: the tail sits beyond the 95th "
            "percentile or the histogram's buckets are too coarse to place it; "
            "the closed form's p95 is never below its mean, so no tail fits",
        )
    terms = []
    for _, row in with_p95.iterrows():
        shaped = _shaped(scenario, row)
        terms.append(
            tail_terms(model, shaped, float(row["mean_running_batch"]), percentile)
        )
    p95 = with_p95["itl_p95_seconds"].to_numpy(float)
    mean = np.array([t.mean_itl_s for t in terms])
    step = np.array([t.decode_step_s for t in terms])
    chunk = np.array([t.chunk_s for t in terms])
    share = np.array([t.share_with_prefill for t in terms])
    above = share > 1.0 - percentile
    below = ~above
    notes: list[str] = []
    factor, factor_fitted = 1.0, False
    if below.sum() >= MIN_SIDE_HOURS:
        factor, factor_fitted = float(np.median(p95[below] / mean[below])), True
        if factor < 1.0:
            raise CalibrationRefused(
                "telemetry.itl_p95_ms",
                f"median {factor:.2f} x the predicted mean ITL",
                "the hours' p95 ITL is below the mean ITL the engine predicts at "
                "the same batch: the decode step, not the tail, is off; fit the "
                "decode step (or import a bench calibration) first",
            )
        if factor > MAX_FACTOR:
            raise CalibrationRefused(
                "itl_percentile_factor",
                round(factor, 2),
                f"p95 over the predicted mean ITL must be at most {MAX_FACTOR:g}",
            )
    else:
        notes.append(
            f"p95 spread not fitted: {int(below.sum())} hours below the stall "
            f"threshold (need {MIN_SIDE_HOURS}), kept 1.0"
        )
    stall, stall_fitted = 1.0, False
    threshold = float(np.median([t.threshold_batch for t in terms]))
    if above.sum() >= MIN_SIDE_HOURS:
        shown = (p95[above] - step[above]) / chunk[above]
        stall, stall_fitted = max(0.0, float(np.median(shown))), True
        if stall > MAX_STALL:
            raise CalibrationRefused(
                "stall_fraction",
                round(stall, 2),
                f"the hours' p95 above the decode step is {stall:.1f} prefill "
                f"chunks; at most {MAX_STALL:g} is a stall",
            )
    else:
        notes.append(
            f"stall not fitted: {int(above.sum())} hours above the stall "
            f"threshold of {threshold:.1f} running requests (need "
            f"{MIN_SIDE_HOURS}; largest hourly batch "
            f"{with_p95['mean_running_batch'].max():.1f}), kept 1.0 (a whole chunk)"
        )
    predicted = lat.percentile_itl_s(
        step,
        mean,
        chunk_s=chunk,
        share_with_prefill=share,
        percentile=percentile,
        factor=factor,
        stall=stall,
    )
    mape, r2 = fit_errors(p95, predicted)
    method = (
        f"tail from hourly p95 ITL: p95 = max(step + {stall:.2f} x chunk above "
        f"{threshold:.1f} running requests, {factor:.2f} x mean); "
        f"{int(below.sum())} hours below, {int(above.sum())} above; observed "
        f"p95 / mean {observed_ratio:.2f}"
    )
    if notes:
        method += "; " + "; ".join(notes)
    return TailFit(
        itl_percentile_factor=factor,
        stall_fraction=stall,
        n_points=len(p95),
        hours_below=int(below.sum()),
        hours_above=int(above.sum()),
        factor_fitted=factor_fitted,
        stall_fitted=stall_fitted,
        observed_ratio=observed_ratio,
        mape=mape,
        r2=r2,
        method=method,
    )


def fit_telemetry(
    hourly: pd.DataFrame,
    *,
    key: CalibrationKey,
    scenario: Scenario,
    current: StepModel,
    current_label: str,
) -> Calibration:
    """The telemetry fit the back-test offers: the decode step
    (``fit_from_telemetry``) and the tail (``fit_tail``) in one calibration.

    ``scenario`` is today's, with the window's request shape and prefix-cache
    hit rate; ``current`` is the step model in effect (``current_label`` names
    its calibration). Where the decode fit is refused (too flat, stall-free),
    the decode step in effect is kept and only the tail is fitted; the method
    says so with the refusal. Both refused: ``CalibrationRefused`` naming the
    decode fit's field and value, with the tail's reason after it.
    """
    prompt = float(scenario.prompt_tokens)
    output = float(scenario.output_tokens)
    cached = prompt * float(scenario.prefix_cache_hit_rate or 0.0)
    decode: Calibration | None = None
    refused: CalibrationRefused | None = None
    try:
        decode = fit_from_telemetry(
            hourly,
            key=key,
            context_tokens=prompt + output / 2.0,
            prompt_tokens=prompt - cached,
            output_tokens=output,
            cached_prompt_tokens=cached,
        )
        params = decode.params
    except CalibrationRefused as exc:
        refused = exc
        params = LatencyParams(
            t0_s=current.t0_s,
            bw_eff_bytes_per_s=current.bw_eff,
            decode_flops_eff=current.decode_flops,
            prefill_flops_eff=current.prefill_flops,
            p0_s=current.p0_s,
        )
    model = replace(
        current,
        t0_s=params.t0_s,
        bw_eff=params.bw_eff_bytes_per_s,
        decode_flops=params.decode_flops_eff,
        prefill_flops=params.prefill_flops_eff,
        p0_s=params.p0_s,
        itl_percentile_factor=1.0,
        stall_fraction=1.0,
    )
    try:
        tail = fit_tail(hourly, model=model, scenario=scenario)
    except CalibrationRefused as exc:
        if decode is None:
            first = refused or exc
            raise CalibrationRefused(
                first.field,
                first.value,
                f"{first.reason}; and the tail cannot be fitted either: {exc}",
            ) from exc
        fit = replace(decode.fit, method=f"{decode.fit.method}; tail not fitted: {exc}")
        return replace(decode, fit=fit)
    params = replace(
        params,
        itl_percentile_factor=tail.itl_percentile_factor,
        stall_fraction=tail.stall_fraction,
    )
    if decode is not None:
        fit = replace(decode.fit, method=f"{decode.fit.method}; {tail.method}")
        return replace(decode, params=params, fit=fit)
    fit = FitQuality(
        tail.n_points,
        tail.mape,
        tail.r2,
        f"decode step kept from {current_label} (its telemetry fit was refused: "
        f"{refused}); {tail.method}",
    )
    return Calibration(
        kind=ENGINE_MEASUREMENTS, key=key, params=params, fit=fit, source="telemetry"
    )
