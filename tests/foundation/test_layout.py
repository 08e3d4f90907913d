"""The house rule of issue 13: no module longer than 600 lines."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600

pytestmark = pytest.mark.smoke


def test_no_module_under_costapp_or_analytics_is_longer_than_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for top in ("costapp", "analytics")
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts
        and (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert not long, f"split these at their seams (README, Layout): {long}"
