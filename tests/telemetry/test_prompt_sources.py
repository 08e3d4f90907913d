"""Prompt tokens by source through the Prometheus adapter, hour by hour.

The counters follow vLLM's own update rule (vllm/v1/metrics/stats.py,
PromptTokenStats.update_from_output): a prefill with ``num_cached`` tokens of
``prompt_len``, ``external`` of them transferred, adds prompt_len - num_cached
to local_compute, num_cached + recomputed - external to local_cache_hit and
external to external_kv_transfer, where recomputed is 1 when the scheduler
gave back the last token of a fully cached prompt (num_cached + 1 ==
prompt_len). So the three add up to prompt tokens plus one per fully cached
request, and the adapter must keep exactly that, through a restart.
"""

from __future__ import annotations

import numpy as np

from costapp.sources.base import DeploymentHourRecord
from costapp.sources.engines import VLLM
from costapp.sources.prometheus import Target
from costapp.sources.prometheus.reader import RawSeries
from costapp.sources.prometheus.records import CounterState, deployment_records

T0 = 1_789_056_000  # an hour's start
STEP = 15.0
HOURS = 3
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def simulated_engine(seed: int) -> tuple[list[RawSeries], dict[int, dict[str, int]]]:
    """Counters of one engine, born in the window, scraped every 15 s for
    three hours with a restart in the second (the counters start again from
    0, so nothing is lost), and the truth per hour: prompt tokens and fully
    cached requests, in the hour of the scrape that first saw them."""
    rng = np.random.default_rng(seed)
    t = T0 + 5.0 + np.arange(HOURS * 3600 / STEP) * STEP
    restart = len(t) // 2
    totals = {name: 0 for name in ("prompt", *SOURCES)}
    values: dict[str, list[float]] = {name: [] for name in totals}
    truth: dict[int, dict[str, int]] = {}
    for i, ts in enumerate(t):
        if i == restart:
            totals = dict.fromkeys(totals, 0)
        hour = int(ts // 3600 * 3600)
        per_hour = truth.setdefault(hour, {"prompt": 0, "recomputed": 0})
        for _ in range(int(rng.poisson(3))):
            prompt_len = int(rng.integers(2, 4000))
            kind = rng.random()
            if kind < 0.3:  # fully cached: the last token is computed again
                num_cached = prompt_len - 1
            elif kind < 0.6:
                num_cached = int(rng.integers(0, prompt_len - 1))
            else:
                num_cached = 0
            external = int(rng.integers(0, num_cached + 1)) if kind < 0.45 else 0
            recomputed = 1 if num_cached + 1 == prompt_len else 0
            totals["prompt"] += prompt_len
            totals["local_compute"] += prompt_len - num_cached
            totals["local_cache_hit"] += num_cached + recomputed - external
            totals["external_kv_transfer"] += external
            per_hour["prompt"] += prompt_len
            per_hour["recomputed"] += recomputed
        for name, value in totals.items():
            values[name].append(float(value))
    labels = {"job": "vllm", "pod": "p0", "model_name": "m"}
    series = [
        RawSeries(
            {**labels, "__name__": "vllm:prompt_tokens_total"},
            t,
            np.array(values["prompt"]),
        ),
        RawSeries(
            {**labels, "__name__": "vllm:num_requests_running"}, t, np.ones(len(t))
        ),
    ]
    for source in SOURCES:
        series.append(
            RawSeries(
                {
                    **labels,
                    "__name__": "vllm:prompt_tokens_by_source_total",
                    "source": source,
                },
                t,
                np.array(values[source]),
            )
        )
    return series, truth


def hour_records(series: list[RawSeries], hours: int) -> list[DeploymentHourRecord]:
    """The adapter's hourly records of the first ``hours`` hours."""
    records = deployment_records(
        target=Target("d", "vllm", 'job="vllm"'),
        series=series,
        born=lambda labels: True,
        state=CounterState(),
        slice_start_s=T0,
        slice_end_s=T0 + hours * 3600,
        interval_default=STEP,
    )
    return [r for r in records if isinstance(r, DeploymentHourRecord)]


def test_sources_add_up_to_prompt_tokens_plus_fully_cached_requests_each_hour() -> None:
    for seed in range(5):
        series, truth = simulated_engine(seed)
        hours = hour_records(series, HOURS)
        assert len(hours) == HOURS
        for r in hours:
            want = truth[int(r.hour.timestamp())]
            assert r.prompt_tokens == want["prompt"]
            sources = (
                r.prompt_tokens_computed,
                r.prompt_tokens_cache_hit,
                r.prompt_tokens_transferred,
            )
            assert None not in sources
            total = sum(sources)  # type: ignore[arg-type]
            assert total - r.prompt_tokens == want["recomputed"]
            assert want["recomputed"] > 0  # the case is exercised


def test_the_three_sources_are_one_replica_not_three() -> None:
    series, _ = simulated_engine(0)
    (hour,) = hour_records(series, 1)
    assert hour.replicas_max == 1.0
    assert VLLM.roles_of("vllm:prompt_tokens_by_source_total")[0].field_label
