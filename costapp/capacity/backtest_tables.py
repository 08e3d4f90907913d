"""The back-test card's text: observed beside predicted, like with like.

Numbers come from ``backtest.py``; this module only writes them as people read
them, through ``costapp/formatting.py`` (a missing figure is ``MISSING``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from statistics import median
from typing import Any

from costapp.capacity.backtest import DeploymentBacktest
from costapp.formatting import MISSING, number


@dataclass(frozen=True)
class BacktestRow:
    figure: str
    observed: str
    predicted: str
    gap: str  # error (like for like) or headroom (replicas)
    tone: str = ""  # good, bad, warn or ""
    note: str = ""


def _hour_text(hour: Any) -> str:
    try:
        return datetime.fromisoformat(str(hour)).strftime("%a %d %b %H:00 UTC")
    except ValueError:
        return str(hour)


def backtest_notes(found: DeploymentBacktest) -> list[str]:
    """The back-test's messages the card does not already show: the large-error
    banner, the circular badge and the per-hour replica verdicts have their place."""
    bt = found.backtest
    if bt is None:
        return []
    return [
        m
        for m in bt.messages
        if not m.startswith(("large error", "circular")) and "met the ITL SLA" not in m
    ]


def _share(value: float | None) -> str:
    return MISSING if value is None else f"{number(value * 100, 1)}%"


def _pct(value: float | None) -> str:
    return MISSING if value is None else f"{value:+.1%}"


def _error_tone(value: float | None, limit: float) -> str:
    if value is None:
        return ""
    return "bad" if abs(value) > limit else "good"


def backtest_rows(
    found: DeploymentBacktest,
    *,
    observed_blocks: int | None,
    predicted_blocks: int | None,
    large_error: float,
    peak_hour: datetime | None = None,
) -> list[BacktestRow]:
    """Observed beside predicted, like with like, for today's back-test."""
    bt = found.backtest
    if bt is None:
        return []
    counts = {h.hour: h.itl_count for h in found.hours}
    compared = [h for h in bt.hours if h.itl_error is not None]
    weight = sum(float(counts.get(h.hour) or 0.0) for h in compared)
    rows: list[BacktestRow] = []
    if compared and weight > 0:
        obs = sum(
            (h.observed_itl_ms or 0.0) * float(counts.get(h.hour) or 0.0)
            for h in compared
        )
        pred = sum(
            (h.predicted_itl_ms or 0.0) * float(counts.get(h.hour) or 0.0)
            for h in compared
        )
        batches = [h.batch for h in compared if h.batch is not None]
        rows.append(
            BacktestRow(
                "Mean ITL at the hourly mean batch",
                f"{number(obs / weight, 1)} ms",
                f"{number(pred / weight, 1)} ms",
                _pct(bt.itl_error),
                _error_tone(bt.itl_error, large_error),
                f"{len(compared)} hours, token-weighted; batch "
                f"{min(batches):.1f} to {max(batches):.1f} per replica; median "
                f"|error| per hour {_share(bt.itl_median_abs_error)}",
            )
        )
    both = [h for h in bt.hours if h.throughput_error is not None]
    if both:
        obs_tps = sum(h.observed_tokens_per_s or 0.0 for h in both) / len(both)
        pred_tps = sum(h.predicted_tokens_per_s or 0.0 for h in both) / len(both)
        rows.append(
            BacktestRow(
                "Output tokens/s per replica at that batch",
                f"{number(obs_tps, 0)} tok/s",
                f"{number(pred_tps, 0)} tok/s",
                _pct(bt.throughput_error),
                _error_tone(bt.throughput_error, large_error),
                f"{len(both)} hours; predicted = batch / predicted mean ITL",
            )
        )
    if bt.telemetry_ratio is not None:
        rows.append(
            BacktestRow(
                "Telemetry against itself: tokens/s ÷ (running ÷ mean ITL)",
                f"{bt.telemetry_ratio:.2f}",
                "≤ 1.00",
                "inconsistent" if bt.telemetry_consistent is False else "consistent",
                "bad" if bt.telemetry_consistent is False else "good",
                "observed only, no engine: each running sequence makes at most one "
                "token per step (plus one first token per request)",
            )
        )
    checked = [h for h in bt.hours if h.replicas_verdict != "not checked"]
    tails = [h for h in checked if h.predicted_p95_ms and h.observed_p95_ms]
    if tails and bt.itl_p95_error is not None:
        rows.append(
            BacktestRow(
                "p95 ITL at the hourly mean batch (the tail that sizes replicas)",
                f"{number(median([h.observed_p95_ms or 0.0 for h in tails]), 1)} ms",
                f"{number(median([h.predicted_p95_ms or 0.0 for h in tails]), 1)} ms",
                _pct(bt.itl_p95_error),
                _error_tone(bt.itl_p95_error, large_error),
                f"{len(tails)} hours that met the SLA, medians; predicted = the "
                "closed form's p95 (prefill stall or spread over the mean) at the "
                "hour's batch",
            )
        )
    if checked:
        over = [h for h in checked if h.replicas_verdict == "over"]
        figure = "Replicas, hours that met the ITL SLA (one-sided)"
        if over:
            worst = max(
                over,
                key=lambda h: (-(h.headroom_replicas or 0.0), h.replicas_observed or 0),
            )
            rows.append(
                BacktestRow(
                    figure,
                    f"{number(worst.replicas_observed, 1)} met the SLA",
                    f"{worst.replicas_predicted} needed",
                    f"{-(worst.headroom_replicas or 0.0):.1f} more than met it",
                    "bad",
                    f"worst hour {_hour_text(worst.hour)}; {len(over)} of "
                    f"{len(checked)} hours over: predicted more replicas than "
                    "served within the SLA (predicted must be ≤ observed)"
                    + (
                        "; the telemetry is inconsistent (row above), so this "
                        "check is not evidence against the engine"
                        if bt.telemetry_consistent is False
                        else ""
                    ),
                )
            )
        else:
            # The peak hour the page sizes replicas for, where it was checked,
            # so "needed" is the same figure here and in the headline.
            peak = [h for h in checked if peak_hour and h.hour == peak_hour.isoformat()]
            busiest = (
                peak[0]
                if peak
                else max(checked, key=lambda h: (h.replicas_observed or 0.0, h.hour))
            )
            which = (
                "the peak hour the page sizes replicas for"
                if peak
                else "busiest checked hour (the peak hour was not checked: its p95 "
                "ITL is unknown or missed the SLA)"
            )
            rows.append(
                BacktestRow(
                    figure,
                    f"{number(busiest.replicas_observed, 1)} met the SLA",
                    f"{busiest.replicas_predicted} needed",
                    f"headroom {busiest.headroom_replicas or 0.0:+.1f}",
                    "good",
                    f"{which}, {_hour_text(busiest.hour)}; all "
                    f"{len(checked)} checked hours within (predicted ≤ observed); "
                    "the gap is headroom, not error",
                )
            )
    elif bt.hours:
        rows.append(
            BacktestRow(
                "Replicas, hours that met the ITL SLA (one-sided)",
                MISSING,
                MISSING,
                "not checked",
                "",
                "no hour with a known p95 ITL within the SLA",
            )
        )
    if observed_blocks and predicted_blocks:
        off = predicted_blocks / observed_blocks - 1
        circular = "num_gpu_blocks" in found.engine_figures
        rows.append(
            BacktestRow(
                "KV blocks (num_gpu_blocks)",
                f"{observed_blocks:,}",
                f"{predicted_blocks:,}",
                _pct(off),
                "warn" if circular else _error_tone(off, 0.10),
                "circular: generated from this engine (demo), agreement checks nothing"
                if circular
                else "vllm:cache_config_info at start-up",
            )
        )
    return rows
