"""The demo's engine series agree with one another as vLLM's do: preemptions
only near a full KV cache; KV usage, running requests and throughput tied by
the tokens each running sequence holds (pure: no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from costapp.sources.demo.story import DEPLOYMENTS, DemoDeployment, DemoEvents
from costapp.sources.demo.telemetry import (
    KV_PREEMPT_FROM,
    PREEMPT_AT_FULL,
    kv_cache,
    preemption_rate,
    simulate,
)

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 21  # the incident (ten days before the end) inside


def test_preemptions_need_a_nearly_full_cache() -> None:
    kv = np.array([0.0, 0.13, 0.5, KV_PREEMPT_FROM, 0.95, 1.0])
    rate = preemption_rate(kv)
    assert list(rate[:4]) == [0.0] * 4
    assert 0 < rate[4] < rate[5] == PREEMPT_AT_FULL


def test_no_more_requests_run_than_the_cache_holds() -> None:
    spec = DEPLOYMENTS[0]
    fits = spec.kv_tokens / (spec.prompt_mean + spec.gen_mean / 2)
    running = np.array([fits / 2] * 60 + [fits * 3] * 60)
    kv, ran, waiting = kv_cache(
        spec, running, np.array([0.5, 0.5]), np.array([False, False])
    )
    assert kv[:60] == pytest.approx(0.5)
    assert kv[60:] == pytest.approx(1.0)
    assert ran[60:] == pytest.approx(fits)
    assert waiting[60:] == pytest.approx(2 * fits)  # the rest wait


@pytest.mark.parametrize("index", range(len(DEPLOYMENTS)))
def test_the_demo_preempts_only_where_its_cache_fills(index: int) -> None:
    spec: DemoDeployment = DEPLOYMENTS[index]
    sim = simulate(
        index,
        spec,
        events=DemoEvents.for_end(END),
        start=END - timedelta(days=DAYS),
        days=DAYS,
        seed=42,
    )
    hours = list(sim.hour_records.values())
    for r in hours:
        assert r.kv_cache_usage_max is not None and r.preemptions is not None
        if r.kv_cache_usage_max < KV_PREEMPT_FROM:
            assert r.preemptions == 0, (spec.name, r.hour, r.kv_cache_usage_max)
    # KV usage is the running sequences' tokens over the cache (the incident
    # halves the cache): the hour's means agree within the minutes' noise.
    incident = DemoEvents.for_end(END)
    for r in hours:
        if r.replicas_mean is None or r.running_mean is None or not r.replicas_mean:
            continue
        halved = incident.incident_start <= r.hour < incident.incident_end
        if halved and spec.name == "chat":
            continue
        per_pod = r.running_mean / r.replicas_mean
        held = per_pod * (spec.prompt_mean + spec.gen_mean / 2) / spec.kv_tokens
        if held > 0.02:  # above the gauge's 1% floor
            assert r.kv_cache_usage_mean == pytest.approx(held, rel=0.1)


@pytest.mark.parametrize("index", range(len(DEPLOYMENTS)))
def test_running_requests_are_throughput_times_the_token_latency(index: int) -> None:
    """Little's law, as vLLM's gauges and histograms have it: a running
    sequence makes one token per step, so running = tokens/s x mean ITL. The
    hours around the scrape gap are off (the tokens made in the gap are
    counted in the hour after it), so most hours are held to it, not all."""
    spec: DemoDeployment = DEPLOYMENTS[index]
    sim = simulate(
        index,
        spec,
        events=DemoEvents.for_end(END),
        start=END - timedelta(days=DAYS),
        days=DAYS,
        seed=42,
    )
    ratios = []
    for h, r in sim.hour_records.items():
        itl = next(x for x in sim.histograms[h] if x.metric == "itl")
        if itl.total_count and r.running_mean and r.generation_tokens:
            mean_itl = itl.total_sum / itl.total_count
            ratios.append(r.running_mean / (r.generation_tokens / 3600 * mean_itl))
    assert np.median(ratios) == pytest.approx(1.0, abs=0.02)
    assert np.mean(np.abs(np.asarray(ratios) - 1) < 0.1) > 0.98
