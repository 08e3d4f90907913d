"""Directions and sustained shifts: the benchmark of docs/baselines.md.

Series and labels come from ``analytics.shift_series`` (daily cost and
requests only, 3-6% noise, unmarked price cuts and savings plans, small
sustained steps and efficiency regressions, holiday dips). The sustained
detector's decision interval and cap and the band's widening were chosen on
seeds 0-499 (``--tune``: the grid, best balance last); the figures are
reported on seeds 1000-1199 (the default), which were not looked at while
tuning. Two series per seed.

    .venv/bin/python bench/bench_shifts.py [--tune] [--seeds 1000-1199]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.anomalies import detect
from analytics.baselines import BaselineConfig
from analytics.shift_series import generate_many, score


def _seeds(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=None)
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="two seeds")
    args = parser.parse_args(argv)
    seeds = args.seeds or (range(0, 500) if args.tune else range(1000, 1200))
    if args.smoke:
        seeds = range(seeds.start, seeds.start + 2)
    data = generate_many(seeds, n_series=2)
    base = BaselineConfig()
    configs = [base]
    if args.tune:
        configs = [
            replace(base, sustained_h=h, sustained_cap=c, band_base=b)
            for h, c, b in itertools.product(
                (1.5, 1.75, 2.0, 2.5), (1.0, 1.5, 2.0, 2.5, 3.0), (0.0, 1.0, 2.0)
            )
        ]  # fmt: skip
    rows = []
    for cfg in configs:
        found = score(data, detect(data, config=cfg, sentences=False)["flag"])
        rows.append((min(found["precision"], found["recall"]), cfg, found))
    rows.sort(key=lambda r: r[0])
    print(f"seeds {seeds.start}-{seeds.stop - 1}, {len(data)} series-days")
    for _, cfg, found in rows[-5:]:
        print(
            f"shift={cfg.sustained_shift} h={cfg.sustained_h} "
            f"cap={cfg.sustained_cap} floor={cfg.sustained_floor} "
            f"base={cfg.sustained_base} band_base={cfg.band_base}: "
            + ", ".join(f"{k}={v:.3f}" for k, v in found.items())
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
