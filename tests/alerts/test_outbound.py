from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from costapp.alerts import outbound
from costapp.alerts.outbound import OutboundRefused, address_refusal, post, url_vet
from tests.support.receiver import listener, receiver


@pytest.fixture
def listeners() -> Iterator[tuple[Any, Any]]:
    with listener("127.0.0.1") as v4, listener("::1", v4.port) as v6:
        yield v4, v6


REFUSED = [
    "http://127.0.0.1:{port}/",
    "http://[::1]:{port}/",
    "http://0.0.0.0:{port}/",
    "http://[::]:{port}/",
    "http://10.0.0.1:{port}/",
    "http://169.254.169.254/latest/meta-data/",
    "http://100.64.0.1/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://2130706433:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://[64:ff9b::7f00:1]:{port}/",  # NAT64 of 127.0.0.1
    "http://[2002:7f00:1::]:{port}/",  # 6to4 of 127.0.0.1
    "ftp://example.com/",
    "file:///etc/passwd",
]


@pytest.mark.parametrize("template", REFUSED)
def test_the_guard_refuses_and_nothing_reaches_a_loopback_listener(
    template: str, listeners: tuple[Any, Any]
) -> None:
    v4, v6 = listeners
    url = template.format(port=v4.port)
    with pytest.raises(OutboundRefused):
        post(url, body=b"{}", headers={}, timeout=1)
    assert (v4.accepted, v6.accepted) == (0, 0)


def test_a_name_a_patched_resolver_maps_to_10_0_0_1_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with pytest.raises(OutboundRefused, match=r"10\.0\.0\.1"):
        url_vet("https://hooks.example.com/x")


def test_one_private_answer_among_public_ones_is_enough_to_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [("93.184.216.34", 443), ("192.168.1.5", 443)]
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", x) for x in answers
        ],
    )
    with pytest.raises(OutboundRefused, match=r"192\.168\.1\.5"):
        url_vet("https://mixed.example.com/")


def test_a_public_address_passes_and_the_connection_is_pinned_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda *a, **k: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))
        ],
    )
    target = url_vet("https://hooks.example.com/a?b=1")
    assert (target.host, target.address, target.path) == (
        "hooks.example.com",
        "93.184.216.34",
        "/a?b=1",
    )


def test_allowed_networks_admit_a_private_range_but_never_loopback(
    settings: Any,
) -> None:
    settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/16"]
    assert address_refusal("10.20.3.4") is None
    assert address_refusal("10.21.3.4") is not None
    settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "169.254.0.0/16"]
    assert address_refusal("127.0.0.1") is not None
    assert address_refusal("169.254.169.254") is not None


def test_a_302_to_loopback_is_not_followed(
    settings: Any, listeners: tuple[Any, Any]
) -> None:
    v4, v6 = listeners
    settings.COSTAPP_OUTBOUND_TEST_LOOPBACK = True
    location = {"Location": f"http://127.0.0.1:{v4.port}/internal"}
    with receiver([(302, b"", 0.0)], headers=location) as rx:
        response = post(rx.url, body=b"{}", headers={}, timeout=2)
    assert response.status == 302
    assert (v4.accepted, v6.accepted) == (0, 0)


def test_the_test_only_loopback_setting_is_refused_from_the_environment() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import costapp.settings"],
        env={"COSTAPP_OUTBOUND_TEST_LOOPBACK": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "test-only" in result.stderr


def test_proxy_variables_are_ignored(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.COSTAPP_OUTBOUND_TEST_LOOPBACK = True
    monkeypatch.setenv("HTTP_PROXY", "http://10.9.9.9:3128")
    monkeypatch.setenv("http_proxy", "http://10.9.9.9:3128")
    with receiver() as rx:
        assert post(rx.url, body=b"{}", headers={}, timeout=2).status == 200
    assert rx.received[0].path == "/hook"
    assert outbound.NAT64.prefixlen == 96
