from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis as redis_lib

from tests.support.services import missing


def pytest_configure(config: pytest.Config) -> None:
    # Property tests are reproducible in CI; locally hypothesis explores.
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60)
    settings.register_profile("dev", deadline=None)
    settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Modules marked ``long`` first, the rest in their order: two xdist
    workers take files in collection order, so a three-minute file collected
    last would run alone at the end while the other worker waits. Tests
    marked ``sqlite_only`` are deselected, not skipped, on another database
    (CI reads a skip as a missing service)."""
    if not os.environ.get("DATABASE_URL", "").startswith("sqlite"):
        other = [i for i in items if i.get_closest_marker("sqlite_only")]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [i for i in items if i not in other]
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A reachable Redis (scripts/services.sh starts one on 127.0.0.1:6379)."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    # Under pytest-xdist each worker gets its own database below the given one
    # (gw0 -> 15, gw1 -> 14, ...), so one worker's flush never empties another's.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        base, _, db = url.rpartition("/")
        url = f"{base}/{int(db or 0) - int(worker[2:])}"
    try:
        client = redis_lib.Redis.from_url(url, socket_timeout=2)
        client.ping()
    except redis_lib.RedisError as exc:
        missing(f"Redis at {url} ({exc}); run scripts/services.sh")
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def postgres_only(settings: object) -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL-only test (the SQLite smoke run skips it)")
