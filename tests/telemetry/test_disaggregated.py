"""A prefill/decode disaggregated deployment: each request counted once.

Both pools' engines count every request. vLLM's proxy sends a request to a
prefill engine with max_tokens=1 (it finishes for "length" after one token)
and then to a decode engine, which counts the transferred KV as prompt tokens
of its own (``external_kv_transfer``) and generates the answer. Read as one
pool, the deployment would show twice its requests and prompt tokens, half
of them finished for "length". With ``prefill_selector`` the prompt is read
from the prefill engines, the rest from the decode engines, and the GPUs of
both are the deployment's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client

from costapp.fleet.fleetfile import fleet_load
from costapp.fleet.validation import deployment_problems
from costapp.models import Deployment
from costapp.sources.base import DeploymentHourRecord, HistogramRecord, Window
from costapp.sources.prometheus import (
    Options,
    PrometheusConfig,
    PrometheusSource,
    Target,
)
from costapp.sources.prometheus.reader import RawSeries
from costapp.sources.prometheus.records import CounterState, deployment_records
from costapp.sources.prometheus.targets import targets_from_deployments
from costapp.sources.promql import labels_match, selector_parse
from tests.support.users import user_in
from tests.telemetry.conftest import BUDGET, PromServer
from tests.telemetry.synth import T0 as SYNTH_T0

T0 = 1_789_056_000  # an hour's start
STEP = 15.0
HOURS = 3
GPU_SHARE = 2.0  # GPUs per replica, both pools
PREFILL = 'pod=~"chat-prefill-.*"'


def simulated_pair(seed: int) -> tuple[list[RawSeries], dict[int, dict[str, int]]]:
    """One prefill and one decode engine serving the same requests, scraped
    every 15 s for three hours, and the truth per hour (in the hour of the
    scrape that first showed the request)."""
    rng = np.random.default_rng(seed)
    t = T0 + 5.0 + np.arange(HOURS * 3600 / STEP) * STEP
    prefill: dict[str, float] = {}
    decode: dict[str, float] = {}
    history: dict[tuple[str, str], list[float]] = {}
    truth: dict[int, dict[str, int]] = {}
    for ts in t:
        hour = truth.setdefault(
            int(ts // 3600 * 3600),
            {"requests": 0, "prompt": 0, "cached": 0, "output": 0, "recomputed": 0},
        )
        for _ in range(int(rng.poisson(2))):
            prompt_len = int(rng.integers(2, 4000))
            cached = int(rng.integers(0, prompt_len)) if rng.random() < 0.5 else 0
            recomputed = 1 if cached + 1 == prompt_len else 0
            output = int(rng.integers(1, 800))
            # The prefill engine: one token, finished for "length".
            for key, x in (
                ("length", 1),
                ("prompt", prompt_len),
                ("local_compute", prompt_len - cached),
                ("local_cache_hit", cached + recomputed),
                ("external_kv_transfer", 0),
                ("generation", 1),
                ("queries", prompt_len),
                ("hits", cached),
            ):
                prefill[key] = prefill.get(key, 0.0) + x
            # The decode engine: the prompt arrives as transferred KV.
            for key, x in (
                ("stop", 1),
                ("prompt", prompt_len),
                ("local_compute", 1),
                ("local_cache_hit", 0),
                ("external_kv_transfer", prompt_len - 1),
                ("generation", output),
                ("queries", prompt_len),
                ("hits", 0),
            ):
                decode[key] = decode.get(key, 0.0) + x
            hour["requests"] += 1
            hour["prompt"] += prompt_len
            hour["cached"] += cached + recomputed
            hour["output"] += output
            hour["recomputed"] += recomputed
        for pod, totals in (("chat-prefill-0", prefill), ("chat-decode-0", decode)):
            for key in (
                "length", "stop", "prompt", "local_compute", "local_cache_hit",
                "external_kv_transfer", "generation", "queries", "hits",
            ):  # fmt: skip
                history.setdefault((pod, key), []).append(totals.get(key, 0.0))
    series: list[RawSeries] = []
    for pod, running, kv in (("chat-prefill-0", 2.0, 0.1), ("chat-decode-0", 7.0, 0.6)):
        labels = {"namespace": "chat", "pod": pod, "model_name": "m", "engine": "0"}

        def add(
            name: str, values: Any, labels: dict[str, str] = labels, **extra: str
        ) -> None:
            series.append(
                RawSeries(
                    {**labels, **extra, "__name__": name}, t, np.asarray(values, float)
                )
            )

        for reason in ("stop", "length"):
            add(
                "vllm:request_success_total",
                history[(pod, reason)],
                finished_reason=reason,
            )
        add("vllm:prompt_tokens_total", history[(pod, "prompt")])
        add("vllm:generation_tokens_total", history[(pod, "generation")])
        add("vllm:prefix_cache_queries_total", history[(pod, "queries")])
        add("vllm:prefix_cache_hits_total", history[(pod, "hits")])
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            add(
                "vllm:prompt_tokens_by_source_total",
                history[(pod, source)],
                source=source,
            )
        add("vllm:num_requests_running", np.full(t.size, running))
        add("vllm:kv_cache_usage_perc", np.full(t.size, kv))
        # The prefill engine's histogram counts requests too (one each).
        done = np.array(history[(pod, "stop")]) + np.array(history[(pod, "length")])
        for histogram in (
            "time_to_first_token_seconds",
            "request_prefill_time_seconds",
        ):
            add(f"vllm:{histogram}_bucket", done, le="+Inf")
            add(f"vllm:{histogram}_count", done)
            add(f"vllm:{histogram}_sum", done * (0.2 if "prefill" in pod else 0.5))
    return series, truth


def records(target: Target, series: list[RawSeries]) -> list[Any]:
    return deployment_records(
        target=target,
        series=series,
        born=lambda labels: True,
        state=CounterState(),
        slice_start_s=T0,
        slice_end_s=T0 + HOURS * 3600,
        interval_default=STEP,
    )


def test_each_request_and_token_is_counted_once_and_both_pools_gpus_are_paid() -> None:
    target = Target("chat-pd", "vllm", 'namespace="chat"', gpu_share=GPU_SHARE)
    for seed in range(4):
        series, truth = simulated_pair(seed)
        split = records(replace(target, prefill_selector=PREFILL), series)
        hours = [r for r in split if isinstance(r, DeploymentHourRecord)]
        assert len(hours) == HOURS
        for r in hours:
            want = truth[int(r.hour.timestamp())]
            assert r.requests_stop == want["requests"]
            assert r.requests_length == 0  # the prefill engines' one-token runs
            assert r.prompt_tokens == want["prompt"]
            assert r.generation_tokens == want["output"]
            # Computed on the prefill pool; nothing counted as transferred
            # inside the deployment (the decode pool's KV came from it).
            assert (
                r.prompt_tokens_computed
                == want["prompt"] - want["cached"] + (want["recomputed"])
            )
            assert r.prompt_tokens_cache_hit == want["cached"]
            assert r.prompt_tokens_transferred == 0
            sources = (
                r.prompt_tokens_computed
                + r.prompt_tokens_cache_hit
                + r.prompt_tokens_transferred
            )
            assert sources - r.prompt_tokens == want["recomputed"]
            assert r.prefix_cache_hits == want["cached"] - want["recomputed"]
            # Both engines are replicas the deployment pays for.
            assert r.replicas_mean == pytest.approx(2.0)
            assert r.gpu_seconds == pytest.approx(2 * 3600 * GPU_SHARE)
            # Load and the KV cache are the decode engines'.
            assert r.running_mean == pytest.approx(7.0)
            assert r.kv_cache_usage_mean == pytest.approx(0.6)
        by_metric = {
            (int(h.hour.timestamp()), h.metric): h
            for h in split
            if isinstance(h, HistogramRecord)
        }
        for hour, want in truth.items():
            # TTFT from the decode engines, prefill time from the prefill's:
            # one observation per request either way.
            assert by_metric[(hour, "ttft")].total_count == want["requests"]
            assert by_metric[(hour, "ttft")].total_sum == pytest.approx(
                0.5 * want["requests"]
            )
            assert by_metric[(hour, "prefill")].total_sum == pytest.approx(
                0.2 * want["requests"]
            )


def test_read_as_one_pool_the_same_engines_count_every_request_twice() -> None:
    """What ``prefill_selector`` corrects (vLLM's counters, read together)."""
    series, truth = simulated_pair(0)
    target = Target("chat-pd", "vllm", 'namespace="chat"', gpu_share=GPU_SHARE)
    hours = [r for r in records(target, series) if isinstance(r, DeploymentHourRecord)]
    for r in hours:
        want = truth[int(r.hour.timestamp())]
        assert r.requests_stop + r.requests_length == 2 * want["requests"]
        assert r.prompt_tokens == 2 * want["prompt"]
        assert r.prompt_tokens_transferred == want["prompt"] - want["requests"]


def test_labels_match_as_prometheus_does() -> None:
    labels = {"pod": "chat-prefill-0", "role": "prefill"}
    assert labels_match(selector_parse(PREFILL), labels)
    assert not labels_match(selector_parse('pod=~"prefill"'), labels)  # anchored
    assert labels_match(selector_parse('pod!~"chat-decode-.*"'), labels)
    assert labels_match(selector_parse('zone=""'), labels)  # absent reads as ""
    assert not labels_match(selector_parse('zone!=""'), labels)
    assert labels_match(selector_parse('role="prefill",pod!="x"'), labels)


def entry(**fields: Any) -> dict[str, Any]:
    return {
        "name": "chat-pd",
        "model": "m",
        "gpu_type": "H100-SXM",
        "prometheus_selector": 'namespace="chat"',
        **fields,
    }


def test_fleet_file_refuses_a_prefill_selector_it_cannot_use_naming_the_field() -> None:
    assert deployment_problems(entry(prefill_selector=PREFILL), pools={}) == []
    (problem,) = deployment_problems(entry(prefill_selector='pod="x"} or {'), pools={})
    assert problem[0] == "prefill_selector" and "pod=" in problem[1]
    (problem,) = deployment_problems(
        entry(prefill_selector=PREFILL, prometheus_selector=""), pools={}
    )
    assert problem[0] == "prefill_selector"
    assert "needs a prometheus_selector" in problem[1]
    (problem,) = deployment_problems(
        entry(prefill_selector=PREFILL, engine="tgi"), pools={}
    )
    assert problem[0] == "prefill_selector" and "'tgi'" in problem[1]


# --- through a real Prometheus ---------------------------------------------------


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def fetched(prometheus: PromServer, targets: list[Target]) -> PrometheusSource:
    return PrometheusSource(
        targets=targets,
        config=PrometheusConfig(url=prometheus.url, max_samples=BUDGET),
        options=Options(scrape_interval_s=60),
        now=lambda: at(SYNTH_T0 + 3 * 86400),
    )


def hours_of(source: PrometheusSource, window: Window) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for batch in source.fetch(window):
        for r in batch.records:
            if isinstance(r, DeploymentHourRecord):
                out.setdefault(r.deployment, {})[int(r.hour.timestamp())] = r
    return out


def test_split_through_prometheus_equals_the_two_pools_read_apart(
    prometheus: PromServer,
) -> None:
    """The synthetic fleet's chat pods, p0 taken for the prefill pool: the
    deployment's hours are p0's prompt and the other pods' requests, and
    the GPU-seconds of all of them (p1 and, from day 2, p2)."""
    window = Window(at(SYNTH_T0 + 86400), at(SYNTH_T0 + 86400 + 6 * 3600))
    pd = Target("pd", "vllm", 'namespace="chat"', prefill_selector='pod="p0"')
    apart = [
        Target("prefill", "vllm", 'namespace="chat",pod="p0"'),
        Target("decode", "vllm", 'namespace="chat",pod!="p0"'),
    ]
    got = hours_of(fetched(prometheus, [pd]), window)["pd"]
    read = hours_of(fetched(prometheus, apart), window)
    assert len(got) == 6
    for hour, r in got.items():
        p, d = read["prefill"][hour], read["decode"][hour]
        assert r.requests_stop == d.requests_stop
        assert r.requests_length == d.requests_length
        assert r.generation_tokens == d.generation_tokens
        assert r.prompt_tokens == p.prompt_tokens
        assert r.prefix_cache_hits == p.prefix_cache_hits
        assert r.replicas_mean == pytest.approx(p.replicas_mean + d.replicas_mean)
        assert r.gpu_seconds == pytest.approx(p.gpu_seconds + d.gpu_seconds)
        assert r.running_mean == d.running_mean
        assert r.kv_cache_usage_mean == d.kv_cache_usage_mean


def test_a_prefill_selector_leaving_a_pool_empty_names_the_labels_and_reads_nothing(
    prometheus: PromServer,
) -> None:
    window = Window(at(SYNTH_T0 + 86400), at(SYNTH_T0 + 86400 + 3600))
    pd = Target("pd", "vllm", 'namespace="chat"', prefill_selector='role="prefill"')
    source = fetched(prometheus, [pd])
    with pytest.raises(Exception, match="prefill_selector") as raised:
        hours_of(source, window)
    message = str(raised.value)
    assert 'matched none of the 2 engines {namespace="chat"}' in message
    assert "no prefill pool" in message
    assert "engine, job, model_name, namespace, pod" in message  # what they carry
    assert "role: ''" in message


@pytest.mark.django_db
def test_fleet_file_to_target_and_page(
    settings: Any, client: Client, tmp_path: Path
) -> None:
    """The fleet file's prefill_selector reaches the run's target and the
    deployment's telemetry page, which says how the pools are read."""
    settings.PROMETHEUS_URL = None
    fleet = {"deployments": [entry(prefill_selector=PREFILL)]}
    fleet_load(path=tmp_path / "fleet.yaml", data=fleet)
    deployment = Deployment.objects.get(name="chat-pd")
    assert deployment.prefill_selector == PREFILL
    (target,) = targets_from_deployments([deployment])
    assert target.prefill_selector == PREFILL
    client.force_login(user_in("lead", "tech lead"))
    page = client.get("/telemetry/chat-pd/").content.decode()
    assert 'id="prefill-pool"' in page
    assert "pod=~&quot;chat-prefill-.*&quot;" in page
    assert "each request counts once" in page
