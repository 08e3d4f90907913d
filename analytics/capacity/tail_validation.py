"""The ITL tail against public serving benchmarks: measured p99 ITL beside the
engine's, for every row of ``data/latency_validation.json`` that reports one.

Two predictions, both with the default tail (the whole prefill chunk in the
step that carries it, no spread):

- *simulated*: ``simulate`` on ``step_model``, the row's load as
  ``latency_validation.predict`` runs it, p99 of the token-weighted step times;
  roofline and the same-model calibration (leave-one-out, as in the latency
  tables). Where that fit reads its prefill rate off stalled bursts
  (``calibration_prefill.stall_prefill_rates``), it reads the *other* runs' p99:
  the row's p99 is then predicted from its neighbours' in the same sweep (not
  circular, not independent either; marked † in the table), never from its
  own;
- *closed form*: ``engine.evaluate`` at the row's batch with the SLA at p99
  (``itl_at_percentile_ms``), only for closed-loop rows, whose batch is the
  client's concurrency; a burst has no steady batch.

What this checks is the shape the sizing rests on: a p99 near the median while
fewer than 1% of the steps carry a prefill, and a step carrying a chunk once
more do. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity import latency_validation as lv
from analytics.capacity.calibration_prefill import PREFILL_FROM_STALLS, STALL_ITL_RATIO
from analytics.capacity.calibration_types import Calibration
from analytics.capacity.engine import evaluate, step_model
from analytics.capacity.simulate import simulate

# Measured p99 / median above this is a stall tail, not a spread of steps (the
# line the bench importer uses to read a prefill rate off stalled bursts).
STALL_RATIO = STALL_ITL_RATIO


def _simulated_p99(row: lv.BenchRow, cal: Calibration | None) -> float:
    cals = (cal,) if cal is not None else ()
    model = step_model(lv.scenario_for(row), calibrations=cals)
    closed = row.load == "concurrency"
    sim = simulate(
        model,
        lv.arrivals_for(row, model),
        prompt_tokens=round(row.mean_input),
        output_tokens=round(row.mean_output),
        concurrency=int(row.max_concurrency or 1) if closed else None,
        resubmit_s=model.p0_s,
    )
    return sim.itl_p99_ms


def _closed_form_p99(row: lv.BenchRow, cal: Calibration | None) -> float | None:
    if row.load != "concurrency" or not row.max_concurrency:
        return None
    # The batch is the client's concurrency: cap it there, with no SLA binding.
    scenario = replace(
        lv.scenario_for(row),
        max_num_seqs=int(row.max_concurrency),
        itl_sla_ms=1e9,
        sla_percentile=0.99,
    )
    result = evaluate(scenario, calibrations=(cal,) if cal is not None else ())
    return result.itl_at_percentile_ms


def tail_table(rows: Sequence[lv.BenchRow]) -> pd.DataFrame:
    """One line per row with a measured p99 ITL."""
    records = []
    for row in rows:
        m = row.measured
        if not m.p99_itl_ms:
            continue
        same = lv.calibrations_for(row, rows)["same_model"]
        # The fit is on the other runs only; where it read its prefill rate
        # off their p99s, this row's p99 is predicted from its neighbours'.
        from_p99 = same is not None and PREFILL_FROM_STALLS in same.fit.method
        record: dict[str, Any] = {
            "id": row.id,
            "load": lv._load_text(row),
            "p50": m.median_itl_ms,
            "p99": m.p99_itl_ms,
            "stalled": m.p99_itl_ms / m.median_itl_ms > STALL_RATIO,
            "sim_roofline": _simulated_p99(row, None),
            "sim_same": _simulated_p99(row, same) if same is not None else None,
            "same_from_p99": from_p99,
            "closed_roofline": _closed_form_p99(row, None),
            "closed_same": _closed_form_p99(row, same) if same is not None else None,
        }
        records.append(record)
    table = pd.DataFrame.from_records(records)
    for column in ("sim_roofline", "sim_same", "closed_roofline", "closed_same"):
        values = pd.to_numeric(table[column], errors="coerce")
        table[f"{column}_error"] = values / table["p99"] - 1.0
    return table


def _cell(value: Any, error: Any, mark: str = "") -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    return f"{value:,.1f} ({error * 100:+.0f}%){mark}"


def tail_markdown(table: pd.DataFrame) -> list[str]:
    lines = [
        "| id | load | measured ITL p50 / p99 ms | p99 / p50 | simulated p99, "
        "roofline | simulated p99, same-model | closed-form p99, roofline | "
        "closed-form p99, same-model |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['id']} | {r['load']} | {r['p50']:.1f} / {r['p99']:,.1f} | "
            f"{r['p99'] / r['p50']:.1f} | "
            + " | ".join(
                _cell(
                    r[c],
                    r[f"{c}_error"],
                    " †" if c.endswith("_same") and r["same_from_p99"] else "",
                )
                for c in ("sim_roofline", "sim_same", "closed_roofline", "closed_same")
            )
            + " |"
        )
    return lines


def tail_summary_markdown(table: pd.DataFrame) -> list[str]:
    """Median absolute p99 error, rows with a stall tail apart from the rest."""
    lines = [
        "| rows | n | simulated, roofline | simulated, same-model | closed form, "
        "roofline | closed form, same-model |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, part in (
        (f"stall tail (p99 > {STALL_RATIO:g} x p50)", table[table["stalled"]]),
        ("no stall tail", table[~table["stalled"]]),
    ):
        cells = []
        for c in ("sim_roofline", "sim_same", "closed_roofline", "closed_same"):
            errors = part[f"{c}_error"].dropna().abs()
            cells.append(
                f"{errors.median() * 100:.0f}% ({len(errors)})" if len(errors) else "—"
            )
        lines.append(f"| {label} | {len(part)} | " + " | ".join(cells) + " |")
    return lines
