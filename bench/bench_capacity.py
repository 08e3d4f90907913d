"""Benchmark the capacity engine (not run by CI).

    python bench/bench_capacity.py [--smoke] [--runs 3] [--out FILE]   (prints the section of docs/benchmarks.md)

1. 10,000 scenarios through ``evaluate_grid`` (vectorised) against ``evaluate``
   called 10,000 times in the same run: the ratio is the figure (goal >= 50x).
2. One simulated hour at 20 requests/s (Llama-3.1-8B on H100, 512 in / 256 out).
Medians of several runs. ``--smoke`` shrinks both to run in seconds.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.capacity import (
    Scenario,
    evaluate,
    evaluate_grid,
    poisson_arrivals,
    simulate,
    step_model,
)


def scenarios(n: int) -> list[Scenario]:
    base = Scenario(
        model="Llama-3.1-8B",
        gpu="H100-SXM",
        gpu_hour_price=6.88,
        target_requests_per_s=30,
    )
    axes = itertools.product(
        ["Llama-3.1-8B", "Qwen2.5-7B", "Qwen3-30B-A3B", "Llama-3.1-70B", "Qwen3-14B"],
        ["H100-SXM", "A100-80GB", "L40S", "H200"],
        [1, 2, 4],
        ["auto", "fp8"],
        [0.8, 0.85, 0.9, 0.95],
        [2048, 8192, 32768],
        [128, 512, 2048],
        [30.0, 50.0, 100.0],
    )
    out = []
    for model, gpu, tp, kv, gmu, mml, prompt, sla in axes:
        out.append(
            replace(
                base,
                model=model,
                gpu=gpu,
                tp=tp,
                kv_dtype=kv,
                gpu_memory_utilization=gmu,
                max_model_len=mml,
                prompt_tokens=prompt,
                itl_sla_ms=sla,
            )
        )
        if len(out) == n:
            break
    return out


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = 500 if args.smoke else 10_000
    sim_seconds = 120 if args.smoke else 3600
    items = scenarios(n)

    grid_times, loop_times, sim_times = [], [], []
    for _ in range(args.runs):
        grid_times.append(timed(lambda: evaluate_grid(items)))
        loop_times.append(timed(lambda: [evaluate(s) for s in items]))
    model = step_model(
        Scenario(
            model="Llama-3.1-8B",
            gpu="H100-SXM",
            max_model_len=8192,
            prompt_tokens=512,
            output_tokens=256,
        )
    )
    arrivals = poisson_arrivals(20.0, sim_seconds, seed=0)
    result = None
    for _ in range(args.runs):
        start = time.perf_counter()
        result = simulate(model, arrivals, prompt_tokens=512, output_tokens=256)
        sim_times.append(time.perf_counter() - start)
    grid = statistics.median(grid_times)
    loop = statistics.median(loop_times)
    sim = statistics.median(sim_times)
    assert result is not None
    lines = [
        "# Capacity engine benchmarks",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs visible (2 cores, shared "
        f"with other jobs), Python {platform.python_version()}. Medians of {args.runs} "
        f"runs{' (smoke size)' if args.smoke else ''}. Produced by "
        "`python bench/bench_capacity.py`.",
        "",
        "| measurement | median | floor in the same run | ratio |",
        "| --- | --- | --- | --- |",
        f"| `evaluate_grid`, {n:,} scenarios | {grid:.3f} s | `evaluate` x {n:,}: "
        f"{loop:.2f} s | {loop / grid:.0f}x faster |",
        f"| `simulate`, {sim_seconds} s at 20 req/s ({len(arrivals):,} requests, "
        f"{result.steps:,} engine steps) | {sim:.2f} s | simulated time {sim_seconds} s "
        f"| {sim_seconds / sim:.0f}x faster than real time |",
        "",
        f"Simulation outcome: mean running batch {result.mean_running_batch:.0f}, TTFT p95 "
        f"{result.ttft_p95_ms:.0f} ms, ITL p95 {result.itl_p95_ms:.1f} ms, "
        f"{result.preemptions} preemptions.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
