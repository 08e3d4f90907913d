"""Behaviour pinned across refactors: the demo's unit-cost figures and its
finance export bytes equal the golden file (tests/economics/golden/).

A change that moves a figure on purpose refreshes the file in the same
commit and says why: ``COSTAPP_GOLDEN_WRITE=1 pytest tests/economics/test_golden.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from itertools import cycle
from pathlib import Path

import pytest
import time_machine
from django.db import connection

from tests.support.demo_data import demo_for_module
from tests.support.golden import (
    PART_TOLERANCE,
    TOLERANCE,
    demo_golden,
    golden_differences,
    golden_summary,
)

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 56  # as test_demo_story: the incident and the holiday inside
GOLDEN = Path(__file__).parent / "golden" / "demo.json"
NAMES = ["chat", "rag", "embed", "batch", "code"]


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=END, days=DAYS):
        yield


def test_the_demo_figures_and_exports_equal_the_golden_file(demo: None) -> None:
    with time_machine.travel(END + timedelta(hours=1), tick=False):
        found = demo_golden(month_start=date(2026, 10, 1), month_end=date(2026, 11, 30))
    if os.environ.get("COSTAPP_GOLDEN_WRITE") == "1":
        # The file holds PostgreSQL's figures (SQLite's REAL decimals move
        # the month forecasts' ETS fit by $100s): never written from SQLite.
        assert connection.vendor == "postgresql", "set DATABASE_URL to PostgreSQL"
        GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(found) == set(want)
    for part in sorted(want):
        tolerance = PART_TOLERANCE.get(part, TOLERANCE)
        differences = golden_differences(
            found[part], want[part], tolerance=tolerance, where=part
        )
        assert not differences, "\n".join(differences[:10])


def _hours(values: list[float | None]) -> dict[str, object]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    lines = ["name\tperiod_start\tcost\tparts"] + [
        f"{name}\t{start + timedelta(hours=i // 5)}\t"
        f"{'' if v is None else format(v, '.12g')}\t"
        f'{{"price": {v or 0}, "fleet": -1.5}}'
        for i, (name, v) in enumerate(zip(cycle(NAMES), values))
    ]
    return golden_summary(lines)


def test_the_comparison_takes_last_digit_noise_and_refuses_a_moved_figure() -> None:
    # Five deployments' hours of ten weeks, as the demo's 13,381.
    hours = [100.0 + i / 7 for i in range(5 * 24 * 70)]
    hours[5] = 100.71428571450001  # written 100.714285715
    want = _hours(hours)
    tolerance = PART_TOLERANCE["unit_cost_figures_hour"]

    def differs(changed: list[float | None]) -> bool:
        return bool(golden_differences(_hours(changed), want, tolerance=tolerance))

    # A value on a 12-digit rounding boundary that flips, every value 1 ulp off.
    assert not differs([v * (1 + 2.3e-16) for v in hours])
    flipped = hours.copy()
    flipped[5] = 100.71428571449999  # written 100.714285714
    assert not differs(flipped)
    # One hour of 8,400 moved by 1e-7, two hours swapped, a figure now missing.
    moved = hours.copy()
    moved[6_000] *= 1 + 1e-7
    assert differs(moved)
    swapped = hours.copy()
    swapped[10], swapped[11] = swapped[11], swapped[10]
    assert differs(swapped)
    assert differs([*hours[:-1], None])
    # Whole lines: numbers within the tolerance, text exactly.
    line = ["deployment\tchat\tday\t5423.846380822973\tanomaly"]
    assert not golden_differences(
        ["deployment\tchat\tday\t5423.84638082298\tanomaly"], line
    )
    assert golden_differences(["deployment\tchat\tday\t5423.85\tanomaly"], line)
    assert golden_differences(
        ["deployment\tchat\tday\t5423.846380822973\tsaving"], line
    )
