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
from pathlib import Path

import pytest
import time_machine

from tests.support.demo_data import demo_for_module
from tests.support.golden import demo_golden

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 56  # as test_demo_story: the incident and the holiday inside
GOLDEN = Path(__file__).parent / "golden" / "demo.json"


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
        GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    for part in sorted(want):
        assert found[part] == want[part], f"{part} differs from {GOLDEN.name}"
    assert set(found) == set(want)
