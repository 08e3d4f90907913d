from __future__ import annotations

import pytest

from tests.economics.world import World, build_world


@pytest.fixture
def world(db: None) -> World:
    return build_world()
