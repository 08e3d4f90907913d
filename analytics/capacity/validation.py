"""Recompute vLLM start-up figures from user inputs and report the error.

Rows carry only what a user sets (model, GPU, dtypes, TP/DP/EP, version and the
flags of the log's non-default-args line); never the weights, activation or KV
GiB the same log prints. Each row says whether it was added after the memory
model was frozen (``"set": "post-freeze"``): the goal is measured on those, and
the rest is reported apart because earlier rows shaped the model. ``"round-4"``
rows (vLLM >= 0.15) were committed before any later model change.
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
    """Median and p90 absolute error: all rows, by freeze set, generation, GPU, TP
    and KV-cache dtype."""
    groups: dict[str, pd.DataFrame] = {"all": table}
    for column, prefix in (
        ("set", ""),
        ("generation", ""),
        ("gpu", "gpu "),
        ("tp", "tp "),
        ("kv_dtype", "kv "),
    ):
        for value, part in table.groupby(column):
            groups[f"{prefix}{value}"] = part
    return pd.DataFrame({name: _summary_row(p) for name, p in groups.items()}).T


def _pct(value: float) -> str:
    return f"{value * 100:+.1f}%"


def rows_markdown(table: pd.DataFrame) -> str:
    """The per-row table of docs/capacity-validation.md, generated from the data."""
    head = (
        "| id | set | GPU | model | weights | KV | TP | util | max_model_len | vLLM "
        "| metric | actual | predicted | error | thin |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- | --- |"
    )
    lines = [head]
    for row in table.itertuples(index=False):
        fmt = "{:,.2f}" if row.metric == "available_kv_cache_gib" else "{:,.0f}"
        lines.append(
            f"| {row.id} | {row.set} | {row.gpu} | {row.model} | {row.weight_dtype} "
            f"| {row.kv_dtype} | {row.tp} | {row.gpu_memory_utilization:g} "
            f"| {row.max_model_len} | {row.engine_version} ({row.generation}) "
            f"| {row.metric} | {fmt.format(row.actual)} | {fmt.format(row.predicted)} "
            f"| {_pct(row.error)} | {'thin' if row.thin else ''} |"
        )
    return "\n".join(lines)


def summary_markdown(summary: pd.DataFrame) -> str:
    """The error table of docs/capacity-validation.md (median and p90 absolute)."""
    lines = [
        "| rows | n | median abs. error | p90 abs. error |",
        "| --- | --- | --- | --- |",
    ]
    for name, row in summary.iterrows():
        lines.append(
            f"| {name} | {int(row['rows'])} | {row['median_abs_error'] * 100:.1f}% "
            f"| {row['p90_abs_error'] * 100:.1f}% |"
        )
    return "\n".join(lines)


def sources_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """Each row's source; rows without a URL quote the log lines they rest on."""
    out = []
    for row in rows:
        out.append(f"- `{row['id']}`: {row['source']}")
        for line in row.get("log_lines") or ():
            out.append(f"  - `{line}`")
    return "\n".join(out)


POST_FREEZE = "post-freeze"
# Rows of vLLM >= 0.15 start-ups added in a fourth round, committed before any
# later change to the memory model; summarised on their own.
ROUND_4 = "round-4"


def docs_blocks(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The generated blocks of docs/capacity-validation.md, by marker name.

    The goal is measured on the rows added after the last freeze; the rest (rows
    that shaped the model, or pointed at terms added before the last freeze) are
    reported apart, and both by generation, GPU and TP. The fourth round's rows
    have a block of their own.
    """
    table = startup_table(rows)
    post = table[table["set"] == POST_FREEZE]
    rest = table[~table["set"].isin((POST_FREEZE, ROUND_4))]
    round_4 = table[table["set"] == ROUND_4]
    blocks = {
        "summary-all": summary_markdown(error_summary(table)),
        "rows": rows_markdown(table),
        "sources": sources_markdown(rows),
    }
    if len(post):
        blocks["summary-post-freeze"] = summary_markdown(error_summary(post))
    if len(rest):
        blocks["summary-rest"] = summary_markdown(error_summary(rest))
    if len(round_4):
        blocks["summary-round-4"] = summary_markdown(error_summary(round_4))
    return blocks
