"""Compare ingested hourly figures with what the generator drew."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tests.telemetry.synth import Truth

COUNTERS = (
    "requests_stop",
    "requests_length",
    "requests_aborted",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
)
GPU_SHARE = {"chat-v1": 1.0, "chat-v0": 3 / 7}
V1 = {"chat-v1"}


def _close(a: float | None, b: float | None, what: str, rel: float = 1e-9) -> None:
    assert a is not None and b is not None, f"{what}: {a} vs {b}"
    assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-9), f"{what}: got {a}, truth {b}"


def expected_hours(truth: Truth, deployment: str, start: int, end: int) -> set[int]:
    return {h for h in truth.hours[deployment] if start <= h < end}


def check_deployment_hours(
    truth: Truth, deployment: str, rows: Iterable[Any], start: int, end: int
) -> int:
    """rows: objects with DeploymentHour's fields. Returns rows checked."""
    by_hour = {int(r.hour.timestamp()): r for r in rows}
    assert set(by_hour) == expected_hours(truth, deployment, start, end), (
        "hours with rows differ from hours with samples (gaps must stay gaps)"
    )
    slots_by_hour: dict[int, list[int]] = {}
    for slot in truth.gauges[(deployment, "running")]:
        slots_by_hour.setdefault(slot // 3600 * 3600, []).append(slot)
    for h, r in by_hour.items():
        what = f"{deployment} {datetime.fromtimestamp(h, UTC):%Y-%m-%d %H:%M}"
        for f in COUNTERS:
            got = getattr(r, f)
            if f.startswith("prefix") and deployment not in V1:
                assert got is None, f"{what} {f} should be missing on V0, got {got}"
                continue
            want = truth.counters[(deployment, f)].get(h, 0.0)
            # Counts from raw samples are exact.
            assert got == want, f"{what} {f}: got {got}, truth {want}"
        assert r.counts_exact is True
        slots = sorted(slots_by_hour[h])
        for name in ("running", "waiting"):
            sums = [sum(truth.gauges[(deployment, name)][s]) for s in slots]
            _close(
                getattr(r, f"{name}_mean"), float(np.mean(sums)), f"{what} {name} mean"
            )
            _close(getattr(r, f"{name}_max"), float(max(sums)), f"{what} {name} max")
        kv = [truth.gauges[(deployment, "kv")][s] for s in slots]
        _close(
            r.kv_cache_usage_mean,
            float(np.mean([np.mean(x) for x in kv])),
            f"{what} kv mean",
        )
        _close(r.kv_cache_usage_max, float(max(max(x) for x in kv)), f"{what} kv max")
        pods = [len(truth.gauges[(deployment, "running")][s]) for s in slots]
        _close(r.replicas_mean, sum(pods) / 60, f"{what} replicas mean")
        _close(r.replicas_max, float(max(pods)), f"{what} replicas max")
        if deployment == "chat-v0":
            # From DCGM: MIG instance 1 (3g) was up the whole hour.
            _close(r.gpu_seconds, 3600 * 3 / 7, f"{what} gpu seconds")
        else:
            _close(
                r.gpu_seconds,
                sum(pods) * 60 * GPU_SHARE[deployment],
                f"{what} gpu seconds",
            )
    return len(by_hour)


def check_histograms(
    truth: Truth, deployment: str, rows: Iterable[Any], start: int, end: int
) -> int:
    got: dict[tuple[str, int], Any] = {
        (r.metric, int(r.hour.timestamp())): r for r in rows
    }
    n = 0
    for (d, metric), per_hour in truth.buckets.items():
        if d != deployment:
            continue
        for h, counts in per_hour.items():
            if not start <= h < end:
                continue
            r = got.pop((metric, h), None)
            assert r is not None, f"{deployment} {metric} {h}: no histogram row"
            want = counts.tolist()  # already cumulative over le
            assert list(r.cumulative_counts) == want, f"{deployment} {metric} {h}"
            assert r.bounds[-1] is None
            assert r.total_count == truth.counters[(d, f"{metric}_count")][h]
            _close(
                r.total_sum,
                truth.counters[(d, f"{metric}_sum")][h],
                f"{metric} sum",
                1e-6,
            )
            n += 1
    assert not got, f"histogram rows without truth: {sorted(got)[:5]}"
    return n


def check_devices(truth: Truth, rows: Iterable[Any], start: int, end: int) -> int:
    n = 0
    for r in rows:
        h = int(r.hour.timestamp())
        key = (r.hostname, r.gpu_instance_id)
        fields = truth.devices[key]
        assert start <= h < end
        for f, per in fields.items():
            _close(getattr(r, f), float(np.mean(per[h])), f"{key} {h} {f}")
        if r.gpu_instance_id:
            assert r.gpu_util_mean is None, "MIG instances report no GPU_UTIL"
            assert r.mig_profile == "3g.40gb"
        _close(r.energy_j, truth.energy[key][h], f"{key} {h} energy")
        n += 1
    return n
