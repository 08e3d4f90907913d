"""Each engine generation's names read into the same fields (issue 25).

Real scrapes (tests/telemetry/fixtures/SOURCES.md) go through both readers
that share the name tables: the /metrics text parser and the Prometheus
adapter's hourly records. An instance that exports an old and a new name of
one field (vLLM 0.9.2-0.10.x did, with the same values; an SGLang instance
seen under both prefixes) is read once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costapp.sources.base import DeploymentHourRecord, HistogramRecord
from costapp.sources.engine_names import names_used
from costapp.sources.engines import SGLANG, VLLM, EngineTable
from costapp.sources.prometheus import Target
from costapp.sources.prometheus.reader import RawSeries
from costapp.sources.prometheus.records import CounterState, deployment_records
from tests.support.exposition import (
    EngineSnapshot,
    engine_snapshot,
    parse_exposition,
)

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_2026 = "vllm_metrics_2026_qwen3_8b_awq_a10_by_source_excerpt.prom"
SGLANG_UNDERSCORE = "sglang_metrics_underscore_prefix_sgl_router_excerpt.prom"
SGLANG_COLON = "sglang_metrics_llama31_8b_docs.prom"
T0 = 1_789_056_000  # 2026-09-10 16:00 UTC, the hour of the vLLM capture

# vLLM 0.9.2-0.10.x exported each renamed series under both names.
VLLM_OLD_NAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
    "vllm:inter_token_latency_seconds_": "vllm:time_per_output_token_seconds_",
}


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def old_names(text: str) -> str:
    """The scrape's renamed series under their deprecated names only."""
    kept = []
    for line in text.splitlines():
        for new, old in VLLM_OLD_NAMES.items():
            line = line.replace(new, old)
        kept.append(line)
    return "\n".join(kept) + "\n"


def both_names(text: str) -> str:
    """As 0.10 exported it: every renamed series under both names."""
    old = [
        line
        for line in old_names(text).splitlines()
        if any(o in line for o in VLLM_OLD_NAMES.values())
    ]
    return text + "\n".join(old) + "\n"


def snapshot(text: str, table: EngineTable) -> EngineSnapshot:
    expo = parse_exposition(text)
    assert expo.malformed == []
    return engine_snapshot(expo, table)


def hour_records(
    text: str, table: EngineTable
) -> tuple[DeploymentHourRecord, dict[str, HistogramRecord]]:
    """The scrape as one hour in Prometheus: each counter from 0 to its
    scraped value, each gauge flat; through the adapter's records."""
    series = []
    for s in parse_exposition(text).samples:
        roles = table.roles_of(s.name)
        if not roles:
            continue
        flat = roles[0].kind in {"gauge", "info"}
        values = [s.value, s.value] if flat else [0.0, s.value]
        t = np.array([T0 + 7.0, T0 + 67.0])
        labels = {**s.labels, "__name__": s.name}
        series.append(RawSeries(labels, t, np.array(values)))
    out = deployment_records(
        target=Target("d", table.engine, 'job="d"'),
        series=series,
        born=lambda labels: False,
        state=CounterState(),
        slice_start_s=T0,
        slice_end_s=T0 + 3600,
        interval_default=60.0,
    )
    (hour,) = [r for r in out if isinstance(r, DeploymentHourRecord)]
    hists = {r.metric: r for r in out if isinstance(r, HistogramRecord)}
    return hour, hists


def test_the_vllm_2026_scrape_reads_requests_tokens_kv_and_itl() -> None:
    snap = snapshot(read(VLLM_2026), VLLM)
    assert snap.counters == {
        "requests_stop": 51,
        "requests_length": 117,
        "requests_aborted": 0,  # abort, error, repetition: not requests
        "prompt_tokens": 811_227,
        "generation_tokens": 74_322,
        "preemptions": 0,
        "prefix_cache_queries": 811_227,
        "prefix_cache_hits": 730_928,
        "prompt_tokens_computed": 80_299,
        "prompt_tokens_cache_hit": 730_928,
        "prompt_tokens_transferred": 0,
    }
    assert snap.gauges == {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}
    itl = snap.histograms["itl"]
    # One ITL sample per output token after the first of each request.
    assert itl.total_count == 74_322 - 168 == itl.cumulative_counts[-1]
    used = names_used(VLLM, snap.names_found)
    assert used.generation == "prompt-sources+v1"
    assert "vllm:time_per_output_token_seconds_bucket" not in used.missing


def test_prompt_tokens_by_source_are_stored_and_add_up_to_prompt_tokens() -> None:
    samples = parse_exposition(read(VLLM_2026)).samples
    (cached,) = [
        s.value for s in samples if s.name == "vllm:prompt_tokens_cached_total"
    ]
    hour, _ = hour_records(read(VLLM_2026), VLLM)
    sources = (
        hour.prompt_tokens_computed,
        hour.prompt_tokens_cache_hit,
        hour.prompt_tokens_transferred,
    )
    assert sources == (80_299, 730_928, 0)
    assert sum(sources) == hour.prompt_tokens == 811_227  # type: ignore[arg-type]
    # local_cache_hit is the hits prefix_cache_hits_total counts (stored
    # there): one figure, never added to it.
    assert hour.prompt_tokens_cache_hit == hour.prefix_cache_hits
    # cached = local + external hits: adding it to local_cache_hit would
    # count the cache twice; it stays declared, not stored.
    assert cached == hour.prompt_tokens_cache_hit + hour.prompt_tokens_transferred  # type: ignore[operator]
    assert VLLM.declared["vllm:prompt_tokens_cached_total"].kind == "counter"
    assert VLLM.roles_of("vllm:prompt_tokens_cached_total") == ()


def test_an_unknown_prompt_source_is_not_stored_and_older_engines_store_none() -> None:
    text = read(VLLM_2026).replace('source="external_kv_transfer"', 'source="disk"')
    hour, _ = hour_records(text, VLLM)
    assert hour.prompt_tokens_transferred is None
    assert hour.prompt_tokens_computed == 80_299
    without = "\n".join(
        line
        for line in read(VLLM_2026).splitlines()
        if "prompt_tokens_by_source" not in line
    )
    hour, _ = hour_records(without, VLLM)
    assert hour.prompt_tokens_computed is None
    assert hour.prompt_tokens_cache_hit is None
    assert hour.prefix_cache_hits == 730_928
    # An engine without the split is not told the series is missing.
    used = names_used(VLLM, snapshot(without, VLLM).names_found)
    assert "vllm:prompt_tokens_by_source_total" not in used.missing


@pytest.mark.parametrize("variant", [old_names, both_names], ids=["old", "both"])
def test_vllm_old_and_doubled_names_give_the_same_figures(variant) -> None:  # type: ignore[no-untyped-def]
    new = snapshot(read(VLLM_2026), VLLM)
    other = snapshot(variant(read(VLLM_2026)), VLLM)
    assert other.counters == new.counters
    assert other.gauges == new.gauges
    assert other.histograms["itl"] == new.histograms["itl"]
    generation = names_used(VLLM, other.names_found).generation
    assert generation == (
        "prompt-sources+v0" if variant is old_names else "prompt-sources+v1+v0"
    )


@pytest.mark.parametrize("variant", [str, old_names, both_names])
def test_the_adapter_reads_each_vllm_generation_into_the_same_hour(variant) -> None:  # type: ignore[no-untyped-def]
    hour, hists = hour_records(variant(read(VLLM_2026)), VLLM)
    assert (hour.requests_stop, hour.requests_length) == (51, 117)
    assert hour.requests_aborted == 0
    assert (hour.prompt_tokens, hour.generation_tokens) == (811_227, 74_322)
    assert (hour.prefix_cache_queries, hour.prefix_cache_hits) == (811_227, 730_928)
    assert hour.prompt_tokens_computed == 80_299
    assert hour.kv_cache_usage_mean == 0.0 and hour.replicas_max == 1.0
    assert hists["itl"].total_count == 74_154
    assert hists["itl"].cumulative_counts[-1] == 74_154


def test_sglang_reads_the_same_figures_under_either_prefix() -> None:
    colon = snapshot(read(SGLANG_COLON), SGLANG)
    underscore = snapshot(read(SGLANG_UNDERSCORE), SGLANG)
    assert underscore.counters == colon.counters
    assert underscore.counters["requests_stop"] == 11_228  # e2e count, old SGLang
    assert underscore.counters["prompt_tokens"] == 8_128_902
    assert underscore.gauges == colon.gauges
    assert underscore.gauges["kv_cache_usage"] == 0.28
    # sgl-router's test kept three of the docs' ITL buckets: the ones kept
    # agree, and so do the totals.
    u, c = underscore.histograms["itl"], colon.histograms["itl"]
    assert (u.total_count, u.total_sum) == (c.total_count, c.total_sum)
    counts = dict(zip(c.bounds, c.cumulative_counts, strict=True))
    assert all(
        counts[b] == n for b, n in zip(u.bounds, u.cumulative_counts, strict=True)
    )
    used = names_used(SGLANG, underscore.names_found)
    assert used.generation == "old"
    assert used.missing and all(n.startswith("sglang_") for n in used.missing)
    assert not any(
        n.startswith("sglang_") for n in names_used(SGLANG, colon.names_found).missing
    )


def test_an_sglang_instance_seen_under_both_prefixes_is_counted_once() -> None:
    text = read(SGLANG_COLON)
    both = snapshot(text + text.replace("sglang:", "sglang_"), SGLANG)
    assert both.counters == snapshot(text, SGLANG).counters
    assert both.replicas == 1
    hour, hists = hour_records(text + text.replace("sglang:", "sglang_"), SGLANG)
    assert hour.requests_stop == 11_228 and hour.generation_tokens == 7_557_572
    assert hour.kv_cache_usage_mean == pytest.approx(0.28)
    assert hists["itl"].total_count == 7_400_757


def test_the_adapter_reads_the_underscore_sglang_scrape() -> None:
    hour, hists = hour_records(read(SGLANG_UNDERSCORE), SGLANG)
    assert hour.requests_stop == 11_228 and hour.prompt_tokens == 8_128_902
    assert hour.running_max == 162 and hour.waiting_max == 2826
    assert hists["ttft"].total_count == 11_008


def test_every_sglang_name_and_declared_series_has_both_spellings() -> None:
    for names in (SGLANG.roles, SGLANG.declared):
        colon = {n.removeprefix("sglang:") for n in names if n.startswith("sglang:")}
        under = {n.removeprefix("sglang_") for n in names if n.startswith("sglang_")}
        assert colon == under and colon
