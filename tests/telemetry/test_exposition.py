"""Real /metrics scrapes through the same name tables as the Prometheus adapter."""

from __future__ import annotations

from pathlib import Path

from costapp.sources.engine_names import names_used
from costapp.sources.engines import SGLANG, VLLM
from tests.support.exposition import (
    device_snapshots,
    engine_snapshot,
    parse_exposition,
)

FIXTURES = Path(__file__).parent / "fixtures"


def parse(name: str):  # type: ignore[no-untyped-def]
    return parse_exposition((FIXTURES / name).read_text())


def test_it_reads_the_busy_vllm_v0_scrape_by_finished_reason() -> None:
    expo = parse("vllm_metrics_v0.6_production_mymodelname.prom")
    assert expo.malformed == []
    snap = engine_snapshot(expo, VLLM)
    assert snap.counters["requests_stop"] == 6193
    assert snap.counters["requests_length"] == 5
    assert snap.counters["requests_aborted"] == 28  # not requests, kept apart
    assert snap.counters["prompt_tokens"] == 5_453_083
    assert snap.gauges == {"running": 3.0, "waiting": 2.0, "kv_cache_usage": 0.0}
    assert snap.cache_config["cache_dtype"] == "fp8_e5m2"
    assert snap.cache_config["num_gpu_blocks"] == "11560"
    e2e = snap.histograms["e2e"]
    assert e2e.bounds[-1] is None and e2e.cumulative_counts[-1] == e2e.total_count
    assert snap.histograms["itl"].total_count == 147_223  # time_per_output_token
    used = names_used(VLLM, snap.names_found)
    assert used.generation == "v0"
    assert "vllm:request_queue_time_seconds_bucket" in used.missing


def test_it_reads_the_qwen3_capture_with_its_cache_config() -> None:
    snap = engine_snapshot(parse("vllm_metrics_qwen3_0.6b_aug2025_v0style.prom"), VLLM)
    assert snap.counters["requests_length"] == 38
    assert "requests_stop" not in snap.counters
    assert snap.cache_config["num_gpu_blocks"] == "2340"
    assert snap.cache_config["block_size"] == "16"
    assert set(snap.histograms) >= {"ttft", "itl", "e2e", "queue", "prefill", "decode"}
    assert snap.replicas == 1


def test_old_sglang_counts_requests_from_its_e2e_histogram() -> None:
    snap = engine_snapshot(parse("sglang_metrics_llama31_8b_docs.prom"), SGLANG)
    assert snap.counters["requests_stop"] == 11228
    assert snap.counters["generation_tokens"] == 7_557_572
    assert snap.gauges["waiting"] == 2826
    assert snap.gauges["kv_cache_usage"] == 0.28
    assert names_used(SGLANG, snap.names_found).generation == "old"


def test_new_sglang_uses_its_request_counter_and_cached_tokens() -> None:
    snap = engine_snapshot(parse("sglang_metrics_v0.5.10_datadog_fixture.prom"), SGLANG)
    assert snap.counters["requests_stop"] == 1  # num_requests_total, not e2e count
    assert snap.counters["prefix_cache_hits"] == 1
    assert snap.counters["prefix_cache_queries"] == 5
    assert set(snap.histograms) >= {"ttft", "itl", "e2e", "queue"}
    assert names_used(SGLANG, snap.names_found).generation == "new"


def test_the_malformed_dcgm_vgpu_lines_are_skipped_and_reported() -> None:
    expo = parse("dcgm_exporter_a800x8_mig_2g20gb.prom")
    assert len(expo.malformed) == 10
    assert all(
        "DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION" in m.text for m in expo.malformed
    )
    assert expo.malformed[0].line_no == 210
    devices = {
        (d.key.gpu_index, d.key.gpu_instance_id): d for d in device_snapshots(expo)
    }
    assert len(devices) == 10  # three 2g.20gb instances on GPU 0, GPUs 1-7 whole
    mig = [d for d in devices.values() if d.key.mig_profile]
    assert {d.key.gpu_instance_id for d in mig} == {"3", "5", "6"}
    for d in mig:
        assert "gpu_util_mean" not in d.values  # MIG rows have no GPU_UTIL
        assert d.key.gpu_share == 2 / 7
    # MIG rows repeat the parent GPU's energy: the same counter three times.
    assert len({d.values["energy_j"] for d in mig}) == 1
    assert "gpu_util_mean" in devices[(1, "")].values


def test_the_sanitized_and_kubernetes_dcgm_scrapes_parse_cleanly() -> None:
    expo = parse("dcgm_exporter_rtx4000ada_lke_k8s.prom")
    assert expo.malformed == []
    (device,) = device_snapshots(expo)
    assert device.key.gpu_model == "NVIDIA RTX 4000 Ada Generation"
    assert device.values["fb_used_mib_mean"] == 1


def test_labels_with_escapes_and_timestamps_parse() -> None:
    expo = parse_exposition(
        'x{a="q\\"uote",b="back\\\\slash"} 1.5e3 1700000000000\ny +Inf\nbad line here\n'
    )
    assert expo.samples[0].labels == {"a": 'q"uote', "b": "back\\slash"}
    assert expo.samples[0].timestamp_ms == 1700000000000
    assert expo.samples[1].value == float("inf")
    assert [m.line_no for m in expo.malformed] == [3]
