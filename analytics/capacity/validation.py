"""Recompute vLLM start-up figures from user inputs and report the error."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity.engine import Scenario, evaluate


def load_startup_figures(path: str | Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data["rows"])


def startup_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    out = []
    for row in rows:
        scenario = Scenario(
            model=row["model"],
            gpu=row["gpu"],
            tp=int(row.get("tp", 1)),
            weight_dtype=row.get("weight_dtype", "bf16"),
            kv_dtype=row.get("kv_dtype", "auto"),
            engine_version=row["engine_version"],
            engine=row.get("engine"),
            gpu_memory_utilization=float(row["gpu_memory_utilization"]),
            max_model_len=int(row["max_model_len"]),
            enforce_eager=bool(row.get("enforce_eager", False)),
            max_num_seqs=row.get("max_num_seqs"),
            max_num_batched_tokens=row.get("max_num_batched_tokens"),
            block_size=int(row.get("block_size", 16)),
        )
        result = evaluate(scenario)
        expected = row["expected"]
        if "num_gpu_blocks" in expected:
            metric, actual, predicted = (
                "num_gpu_blocks",
                expected["num_gpu_blocks"],
                result.num_gpu_blocks,
            )
        else:
            metric, actual, predicted = (
                "kv_cache_tokens",
                expected["kv_cache_tokens"],
                result.kv_cache_tokens,
            )
        out.append(
            {
                "id": row["id"],
                "generation": result.scenario.engine or "",
                "gpu": row["gpu"],
                "model": row["model"],
                "weight_dtype": scenario.weight_dtype,
                "kv_dtype": scenario.kv_dtype,
                "tp": scenario.tp,
                "gpu_memory_utilization": scenario.gpu_memory_utilization,
                "max_model_len": scenario.max_model_len,
                "engine_version": scenario.engine_version,
                "metric": metric,
                "actual": actual,
                "predicted": predicted,
                "error": (predicted - actual) / actual,
                "thin": bool(row.get("thin", False)),
                "source": row["source"],
            }
        )
    table = pd.DataFrame(out)
    table["abs_error"] = table["error"].abs()
    return table


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    groups = {"all": table}
    for generation, part in table.groupby("generation"):
        groups[str(generation)] = part
    return pd.DataFrame(
        {
            name: {
                "rows": len(part),
                "median_abs_error": float(np.median(part["abs_error"])),
                "p90_abs_error": float(np.quantile(part["abs_error"], 0.9)),
            }
            for name, part in groups.items()
        }
    ).T
