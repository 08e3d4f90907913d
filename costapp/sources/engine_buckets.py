"""Default bucket edges of the engines' latency histograms."""

from __future__ import annotations

# vLLM's default bucket edges of its latency histograms
# (vllm/engine/metrics.py, kept in v1/metrics/loggers.py), +Inf after them.
# An SLO rule on "requests over the threshold" counts them at one of these
# edges (costapp/telemetry/prometheus_rules.py).
VLLM_BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
        2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ),
    "itl": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
        5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    ),
}  # fmt: skip
