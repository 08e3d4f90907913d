from __future__ import annotations

from pathlib import Path

import numpy as np

from analytics.capacity.validation import (
    error_summary,
    load_startup_figures,
    startup_table,
)

DATA = Path(__file__).parent / "data" / "startup_figures.json"


def test_the_memory_model_reproduces_vllm_start_up_figures_within_5_percent_median() -> (
    None
):
    rows = load_startup_figures(DATA)
    assert len(rows) >= 12
    table = startup_table(rows)
    assert set(table["generation"]) == {"v0", "v1"}
    assert float(np.median(table["abs_error"])) <= 0.05
    summary = error_summary(table)
    assert summary.loc["all", "rows"] == len(rows)


def test_rows_added_after_the_freeze_are_reported_apart_and_every_row_has_a_source() -> (
    None
):
    table = startup_table(load_startup_figures(DATA))
    summary = error_summary(table)
    assert {"pre-freeze", "freeze-1"} <= set(summary.index)
    assert summary.loc["freeze-1", "rows"] == (table["set"] == "freeze-1").sum()
    assert {1, 2, 4} <= set(table["tp"])
    assert table["source"].str.len().gt(20).all()


def test_no_startup_row_uses_figures_read_from_the_log() -> None:
    forbidden = {
        "weights_gib",
        "activation_gib",
        "kv_cache_gib",
        "non_torch_gib",
        "total_gpu_memory_gib",
    }
    for row in load_startup_figures(DATA):
        assert not forbidden & set(row), row["id"]
