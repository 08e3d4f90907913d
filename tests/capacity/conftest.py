from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from costapp.models import Deployment
from tests.capacity.seed_demo import seed_chat
from tests.support.users import user_in

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime(2025, 9, 10, 12, 30, tzinfo=UTC)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield NOW


@pytest.fixture
def chat(db, frozen) -> Deployment:
    """Llama-3.1-8B on one H100 with fp8 KV discovered and a week of hours."""
    return seed_chat(NOW)


@pytest.fixture
def lead(db) -> User:
    return user_in("lead", "tech lead", password="pw")


@pytest.fixture
def browser_client(client: Client, lead: User) -> Client:
    client.force_login(lead)
    return client
