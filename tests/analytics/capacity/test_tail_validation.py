"""The ITL tail against the public benchmarks' p99 ITL (docs/capacity-validation.md,
"The ITL tail"): the doc's tables are recomputed from the data, and the shape the
sizing rests on is checked against the measured rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from analytics.capacity import latency_validation as lv
from analytics.capacity import tail_validation as tv
from analytics.capacity.calibration_prefill import PREFILL_FROM_STALLS

DOC = Path(__file__).resolve().parents[3] / "docs" / "capacity-validation.md"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return tv.tail_table(lv.load_benchmarks())


def _block(name: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = f"<!-- generated:{name} -->\n"
    assert start in text, name
    body = text.split(start, 1)[1].split(f"<!-- /generated:{name} -->", 1)[0]
    return body.strip("\n").split("\n")


def test_the_doc_tables_are_the_ones_the_data_gives(table: pd.DataFrame) -> None:
    assert _block("tail") == tv.tail_markdown(table)
    assert _block("tail-summary") == tv.tail_summary_markdown(table)


def _row(table: pd.DataFrame, concurrency: int) -> pd.Series:
    return table[table["id"] == f"h100-qwen3-8b-sharegpt-233-c{concurrency}"].iloc[0]


def test_the_stall_appears_where_the_closed_form_puts_it(table: pd.DataFrame) -> None:
    """Qwen3-8B at 220 output tokens: 1 or 2 running requests put under 1% of
    the steps in a prefill (p99 at the decode step), 4 and 8 put more (p99 in a
    step that carries a prompt). The measured p99 jumps between 2 and 4 too."""
    c1, c2, c4, c8 = (_row(table, c) for c in (1, 2, 4, 8))
    for quiet in (c1, c2):
        assert not quiet["stalled"]
        assert abs(quiet["closed_roofline_error"]) < 0.15
    for loud in (c4, c8):
        assert loud["stalled"]
        assert loud["closed_roofline"] > 1.5 * c2["closed_roofline"]


def test_the_default_stall_does_not_overstate_the_steady_state_tail(
    table: pd.DataFrame,
) -> None:
    """Where the batch is steady (closed loops) the closed form's stalled p99
    is below the measured one (ShareGPT's long prompts stall longer than a
    chunk of the mean prompt): a whole chunk is not an overstatement."""
    closed = table.dropna(subset=["closed_roofline"])
    stalled = closed[closed["stalled"]]
    assert len(stalled) == 2
    assert (stalled["closed_roofline"] < stalled["p99"]).all()
    assert (stalled["closed_same"] < stalled["p99"]).all()


def test_no_rows_own_p99_enters_its_same_model_prediction() -> None:
    """The same-model fit may read its prefill rate off stalled bursts' p99:
    those of the other runs. Changing a row's own p99 changes nothing of the
    calibration it is predicted with (transfer: another model's runs)."""
    rows = lv.load_benchmarks()
    marked = 0
    for i, row in enumerate(rows):
        if not row.measured.p99_itl_ms:
            continue
        before = lv.calibrations_for(row, rows)
        moved = replace(
            row,
            measured=replace(row.measured, p99_itl_ms=row.measured.p99_itl_ms * 3),
        )
        after = lv.calibrations_for(moved, [*rows[:i], moved, *rows[i + 1 :]])
        for method in ("same_model", "transfer"):
            b, a = before[method], after[method]
            assert (b is None) == (a is None), (row.id, method)
            if b is not None and a is not None:
                assert b.params == a.params, (row.id, method)
        same = before["same_model"]
        marked += same is not None and PREFILL_FROM_STALLS in same.fit.method
    assert marked == 16 + 4  # the A100 rows: 7B and 32B sweeps
