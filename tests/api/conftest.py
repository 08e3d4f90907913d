from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from costapp.api.tokens import api_token_create
from costapp.economics.unit_costs.services import unit_costs_recompute
from tests.economics.world import World, build_world
from tests.support.users import user_in

# Two days after the world's last day, so every figure is in the past.
NOW = datetime(2026, 10, 13, 6, tzinfo=UTC)


@pytest.fixture
def world(db: None) -> World:
    built = build_world()
    unit_costs_recompute(now=NOW)
    return built


TokenFor = Callable[..., str]


@pytest.fixture
def token_for(db: None) -> TokenFor:
    made = iter(range(1000))

    def make(*groups: str, scopes: tuple[str, ...] = ("api",), days: int = 30) -> str:
        user = user_in(f"api-user-{next(made)}", *groups)
        return api_token_create(
            user=user,
            name="test",
            scopes=scopes,
            expires_at=datetime.now(UTC) + timedelta(days=days),
        ).secret

    return make
