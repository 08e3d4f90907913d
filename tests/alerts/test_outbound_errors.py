"""A failed send is named as it happened: refused, timed out, unresolvable,
TLS. Real sockets on 127.0.0.1 (through the test-only loopback setting);
the resolver is patched where a name is needed, so nothing leaves loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from costapp.alerts.delivery import delivery_send
from costapp.alerts.outbound import OutboundFailed, post
from costapp.alerts.services import channel_upsert
from costapp.models import AlertRule, Delivery
from tests.alerts.conftest import event_delivery
from tests.support.receiver import receiver


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound (so nobody else takes it) and not
    listening: a connection to it is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_refused_connection_is_reported_as_refused_not_as_a_timeout(
    loopback: None, closed_port: int
) -> None:
    started = time.monotonic()
    with pytest.raises(OutboundFailed) as failed:
        post(f"http://127.0.0.1:{closed_port}/hook", body=b"{}", headers={}, timeout=5)
    assert str(failed.value) == f"connection refused by 127.0.0.1:{closed_port}"
    assert not failed.value.timeout
    assert time.monotonic() - started < 2


@pytest.mark.django_db
def test_the_delivery_log_says_refused_and_the_send_is_retried(
    loopback: None, closed_port: int, rule: AlertRule
) -> None:
    url = f"http://127.0.0.1:{closed_port}/hook"
    channel = channel_upsert(name="hook", kind="webhook", config={"url": url}).channel
    delivery = event_delivery(rule, channel)
    outcome = delivery_send(delivery_id=delivery.pk)
    assert outcome is not None and outcome.retry and outcome.status == "pending"
    assert outcome.error == f"connection refused by 127.0.0.1:{closed_port}"
    assert Delivery.objects.get(pk=delivery.pk).error == outcome.error


def test_a_name_that_does_not_resolve_is_reported_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def nxdomain(*args: Any, **kwargs: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", nxdomain)
    with pytest.raises(OutboundFailed, match=r"^cannot resolve hooks\.example\.test"):
        post("https://hooks.example.test/x", body=b"{}", headers={}, timeout=1)


def test_tls_spoken_to_a_plain_http_receiver_is_a_tls_error(loopback: None) -> None:
    with receiver() as rx:
        url = rx.url.replace("http://", "https://")
        with pytest.raises(OutboundFailed, match=r"^TLS error: ") as failed:
            post(url, body=b"{}", headers={}, timeout=2)
    assert "timed out" not in str(failed.value)


def test_a_silent_receiver_times_out_and_says_after_how_long(loopback: None) -> None:
    with (
        receiver([(200, b"late", 2.0)]) as rx,
        pytest.raises(OutboundFailed) as failed,
    ):
        post(rx.url, body=b"{}", headers={}, timeout=0.3)
    assert str(failed.value).startswith("timed out after 0.3 s waiting for 127.0.0.1:")
    assert failed.value.timeout
