"""Recompute vLLM start-up figures from user inputs and report the error.

Rows carry only what a user sets (model, GPU, dtypes, TP/DP/EP, version and the
flags of the log's non-default-args line); never the weights, activation or KV
GiB the same log prints. Each row says whether it was added after the memory
model was frozen (``"set": "post-freeze"``): the goal is measured on those, and
the rest is reported apart because earlier rows shaped the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analytics.capacity.catalog import ModelSpec, model_from_hf_config
from analytics.capacity.engine import Scenario, evaluate

GiB = 1024**3

# Flags a row may set, as the start-up log's non-default args show them.
FLAG_FIELDS = (
    "enforce_eager", "max_num_seqs", "max_num_batched_tokens", "block_size",
    "estimate_cudagraphs", "kv_cache_memory_bytes", "model_runner_v2",
    "enable_chunked_prefill", "data_parallel_size", "enable_expert_parallel",
    "usage_context",
)  # fmt: skip


def load_startup_figures(path: str | Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data["rows"])


def _model(row: Mapping[str, Any]) -> str | ModelSpec:
    """A catalogue name, or the architecture from the row's ``hf_config`` (the
    model's public Hugging Face ``config.json`` fields) for models outside it."""
    if row.get("hf_config"):
        return model_from_hf_config(row["hf_config"], name=str(row["model"]))
    return str(row["model"])


def _scenario(row: Mapping[str, Any]) -> Scenario:
    flags = {k: row[k] for k in FLAG_FIELDS if row.get(k) is not None}
    return Scenario(
        model=_model(row),
        gpu=row["gpu"],
        tp=int(row.get("tp", 1)),
        weight_dtype=row.get("weight_dtype", "bf16"),
        kv_dtype=row.get("kv_dtype", "auto"),
        engine_version=row["engine_version"],
        engine=row.get("engine"),
        gpu_memory_utilization=float(row["gpu_memory_utilization"]),
        max_model_len=int(row["max_model_len"]),
        **flags,
    )


def _metric(row: Mapping[str, Any], result: Any) -> tuple[str, float, float]:
    expected = row["expected"]
    if "num_gpu_blocks" in expected:
        return "num_gpu_blocks", expected["num_gpu_blocks"], result.num_gpu_blocks
    if "kv_cache_tokens" in expected:
        return "kv_cache_tokens", expected["kv_cache_tokens"], result.kv_cache_tokens
    # "Available KV cache memory: X GiB" (V1 logs that print no token count).
    return (
        "available_kv_cache_gib",
        expected["available_kv_cache_gib"],
        round(result.kv_cache_memory_bytes / GiB, 2),
    )


def startup_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    out = []
    for row in rows:
        scenario = _scenario(row)
        result = evaluate(scenario)
        metric, actual, predicted = _metric(row, result)
        out.append(
            {
                "id": row["id"],
                "generation": row.get("engine") or "",
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
                "set": row.get("set", "pre-freeze"),
                "source": row["source"],
            }
        )
    table = pd.DataFrame(out)
    table["abs_error"] = table["error"].abs()
    return table


def _summary_row(part: pd.DataFrame) -> dict[str, float]:
    return {
        "rows": len(part),
        "median_abs_error": float(np.median(part["abs_error"])),
        "p90_abs_error": float(np.quantile(part["abs_error"], 0.9)),
    }


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and p90 absolute error: all rows, by freeze set, generation, GPU, TP."""
    groups: dict[str, pd.DataFrame] = {"all": table}
    for column, prefix in (
        ("set", ""),
        ("generation", ""),
        ("gpu", "gpu "),
        ("tp", "tp "),
    ):
        for value, part in table.groupby(column):
            groups[f"{prefix}{value}"] = part
    return pd.DataFrame({name: _summary_row(p) for name, p in groups.items()}).T
