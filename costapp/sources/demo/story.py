"""What the demo shows: its deployments, how each behaves, and when the
story's events happen (the holiday, the scrape gap, the incident).

This is the one file to edit to change what the demo tells; rules, channels
and budgets go in ``fleet/demo_fleet.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

ACCOUNT_ID = "123456789012"
TAG_KEY = "costapp:workload"
MINUTE = 60
HOUR = 3600
DAY = 86400


@dataclass(frozen=True)
class DemoDeployment:
    """How one demo deployment behaves (not the fleet file: that is YAML)."""

    name: str
    gpu_model: str
    gpus_per_replica: int  # device rows per replica (TP degree, or 1 MIG instance)
    gpu_share: float  # GPU-equivalents per replica (MIG: slices/7)
    mig_profile: str
    instance_type: str
    pool: str | None
    peak_rps: float
    capacity_rps: float  # per replica at the SLA, fp8 KV
    min_replicas: int
    max_replicas: int
    prompt_mean: float
    gen_mean: float
    p_length: float
    p_abort: float
    ttft_s: float  # median at low load
    itl_s: float
    # KV-cache capacity of one replica, tokens: what the capacity engine predicts
    # for the fleet file's configuration (tests/fleet/test_demo.py checks it).
    kv_tokens: int
    fb_total_mib: float
    host_prefix: str
    # vLLM's --kv-cache-dtype; "auto" keeps the model's dtype (bf16 here).
    kv_dtype: str = "fp8"
    # A declared true ITL curve, (running batch per replica, mean ITL in s)
    # points, linear between them: when set, this deployment's running batch
    # and ITL histograms come from it (not from itl_s, not from the engine).
    itl_curve: tuple[tuple[float, float], ...] = ()


# summarize's true mean ITL (s) by running batch per replica: 1.3 x the capacity
# engine's roofline for Llama-3.1-8B bf16 on an L40S (vLLM 0.10.1, bf16 KV) at
# summarize's request shape (3,200 prompt tokens, 35% prefix-cache hits, 260
# output tokens), prefill share of the steps included, as the ITL histogram
# measures it. Written down here, never computed from the engine, so the
# back-test on the demo must find the roofline 1/1.3 - 1 = -23% off;
# tests/capacity/test_demo_backtest.py checks the 1.3 against the engine.
SUMMARIZE_ITL_CURVE: tuple[tuple[float, float], ...] = (
    (1, 0.03721), (2, 0.03924), (4, 0.04330), (8, 0.05141), (16, 0.06764),
    (32, 0.10008), (64, 0.16499),
)  # fmt: skip
# Spread of the curve deployment's ITL histogram: lognormal, sigma 0.25, so
# p95 = 1.46 x the mean (decode steps vary little; no prefill stalls modelled).
CURVE_ITL_SIGMA = 0.25
# Telemetry figures the demo takes from the capacity engine itself: agreement
# with the engine on these checks nothing ("circular" on the what-if page). Each
# demo run carries them in its params, which is where the capacity page reads them.
# num_gpu_blocks (vllm:cache_config_info) is each spec's kv_tokens / 16, and
# kv_cache_usage is computed against kv_tokens.
ENGINE_FIGURES = frozenset({"num_gpu_blocks", "kv_cache_usage"})

DEPLOYMENTS: tuple[DemoDeployment, ...] = (
    DemoDeployment(
        "chat", "NVIDIA H100 80GB HBM3", 4, 4.0, "", "p5.48xlarge", "p5-chat",
        peak_rps=30.0, capacity_rps=3.0, min_replicas=3, max_replicas=24,
        prompt_mean=1800, gen_mean=450, p_length=0.035, p_abort=0.01,
        ttft_s=0.18, itl_s=0.016, kv_tokens=852_352, fb_total_mib=81559,
        host_prefix="ip-10-0-1-",
    ),
    DemoDeployment(
        "summarize", "NVIDIA L40S", 1, 1.0, "", "g6e.xlarge", None,
        # capacity_rps: where SUMMARIZE_ITL_CURVE's p95 (1.46 x the mean, see
        # CURVE_ITL_SIGMA) reaches the 80 ms SLA: batch 9.6 at a mean of
        # 54.7 ms, 176 tok/s, 0.68 req/s.
        peak_rps=6.0, capacity_rps=0.68, min_replicas=2, max_replicas=16,
        prompt_mean=3200, gen_mean=260, p_length=0.06, p_abort=0.005,
        # bf16 KV (vLLM's default), so the headline what-if, fp8 KV, can be
        # tried on the demo: half the bytes per token, twice the pool.
        ttft_s=0.45, itl_s=0.022, kv_tokens=194_448, fb_total_mib=46068,
        host_prefix="ip-10-0-2-", kv_dtype="auto",
        itl_curve=SUMMARIZE_ITL_CURVE,
    ),
    DemoDeployment(
        "classify", "NVIDIA L4", 1, 1.0, "", "g6.xlarge", None,
        peak_rps=22.0, capacity_rps=7.0, min_replicas=2, max_replicas=8,
        prompt_mean=420, gen_mean=6, p_length=0.002, p_abort=0.002,
        ttft_s=0.08, itl_s=0.018, kv_tokens=235_152, fb_total_mib=23034,
        host_prefix="ip-10-0-4-",
    ),
    DemoDeployment(
        "code-assist", "NVIDIA A100-SXM4-80GB", 1, 3 / 7, "3g.40gb",
        "p4de.24xlarge", "a100-mig",
        peak_rps=8.0, capacity_rps=1.6, min_replicas=2, max_replicas=8,
        prompt_mean=2600, gen_mean=120, p_length=0.02, p_abort=0.03,
        ttft_s=0.22, itl_s=0.026, kv_tokens=735_376, fb_total_mib=40192,
        host_prefix="ip-10-0-3-",
    ),
    DemoDeployment(
        "moderation", "NVIDIA A100-SXM4-80GB", 1, 2 / 7, "2g.20gb",
        "p4de.24xlarge", "a100-mig",
        peak_rps=12.0, capacity_rps=3.2, min_replicas=2, max_replicas=16,
        prompt_mean=650, gen_mean=8, p_length=0.001, p_abort=0.002,
        # 1,340 blocks: the engine's pool once the V1 sampler share and the
        # CUDA-graph flag follow vLLM's version (was 1,738 under the old terms).
        ttft_s=0.09, itl_s=0.024, kv_tokens=21_440, fb_total_mib=19968,
        host_prefix="ip-10-0-3-",
    ),
)  # fmt: skip
INCIDENT_DEPLOYMENT = "chat"
# fp8 -> auto (bf16) halves the KV cache: the batch halves and a replica
# carries about 1/1.4 of the traffic it did within the ITL target.
INCIDENT_CAPACITY = 1 / 1.4
POOL_NODES_MIG = 1  # the a100-mig pool is one p4de node, 3g+2g+2g on each GPU
WEEKLY = (1.0, 1.02, 1.03, 1.01, 0.95, 0.68, 0.62)  # Monday first


@dataclass(frozen=True)
class DemoEvents:
    """When the story's events happen, relative to the end of the demo."""

    holiday: date
    gap_start: datetime
    gap_end: datetime
    incident_start: datetime
    incident_end: datetime

    @classmethod
    def for_end(cls, end: datetime) -> DemoEvents:
        holiday = (end - timedelta(days=27)).date()
        while holiday.weekday() >= 5:  # a public holiday on a weekday
            holiday -= timedelta(days=1)
        gap_day = end - timedelta(days=20)
        incident = end - timedelta(days=10) + timedelta(hours=14)
        return cls(
            holiday=holiday,
            gap_start=gap_day + timedelta(hours=3),
            gap_end=gap_day + timedelta(hours=9),
            incident_start=incident,
            incident_end=incident + timedelta(hours=72),
        )
