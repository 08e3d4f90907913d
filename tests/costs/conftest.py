from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.costs.ce_emulator import CostExplorerEmulator
from tests.support.services import free_port, missing, wait_for

ACCOUNT = "111122223333"
OTHER_ACCOUNT = "444455556666"


@pytest.fixture(autouse=True)
def dummy_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach a real AWS account from a test, whatever the shell holds.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def ce(monkeypatch: pytest.MonkeyPatch) -> Iterator[CostExplorerEmulator]:
    emulator = CostExplorerEmulator(page_size=4)
    url = emulator.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    yield emulator
    emulator.stop()


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cost_lines() -> list[tuple[Any, ...]]:
    """The bill as stored, without bookkeeping columns, sorted."""
    from costapp.models import CostLine
    from costapp.sources.base import CostRecord

    return sorted(
        CostLine.objects.values_list("source", *(f.name for f in fields(CostRecord)))
    )


def amounts_by_day(field: str = "amortized_cost") -> dict[tuple[str, str], Decimal]:
    from costapp.models import CostLine

    out: dict[tuple[str, str], Decimal] = {}
    for line in CostLine.objects.all():
        key = (line.period_start.strftime("%Y-%m-%dT%H"), line.usage_type)
        out[key] = out.get(key, Decimal(0)) + getattr(line, field)
    return out


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A moto S3 server on loopback with a bucket "exports"; boto3 clients
    made in the test reach it (AWS_ENDPOINT_URL)."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        missing("moto[server] (requirements-dev.txt)")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    import socket

    wait_for(
        lambda: socket.create_connection(("127.0.0.1", port), 1) is not None,
        what="moto server",
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="exports")
    yield client
    server.stop()
