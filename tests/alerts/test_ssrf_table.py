"""Every row of the outbound address table, in every spelling an attacker uses.

Each IPv4 block is tried at its first and last address (or the nearest ones
that are its own, not a more specific row's) as dotted, decimal, octal, hex,
short and mixed forms, and inside every IPv6 encoding that carries an IPv4
address; each IPv6 block as written; and, through a patched resolver, as the
answer for a name. A public address stays accepted where it is really
public. Nothing here resolves or connects: the resolver is patched, and an
address literal must never reach it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costapp.alerts.addresses import IPV4, IPV6, Block, IPAddress, Verdict, block_of
from costapp.alerts.outbound import (
    OutboundRefused,
    address_refusal,
    ipv4_literal,
    unwrap,
    url_vet,
)

PUBLIC_V4 = ipaddress.IPv4Address("8.8.8.8")
PUBLIC_V6 = ipaddress.IPv6Address("2606:4700:4700::1111")
NAME = "hooks.example.test"
LOW_32 = 0xFFFFFFFF
REAL_GETADDRINFO = socket.getaddrinfo


def _own_addresses(block: Block) -> list[IPAddress]:
    """First and last address of the row, or the nearest ones (and its
    middle) that no more specific row claims."""
    net = block.network
    first, last = net.network_address, net.broadcast_address
    middle = first + net.num_addresses // 2
    candidates = [first, last, first + 1 if last > first else first, middle]
    own = sorted({a for a in candidates if block_of(a) == block})
    assert own, block
    return own


def ipv4_spellings(address: ipaddress.IPv4Address) -> dict[str, str]:
    """How a URL host can spell one IPv4 address for glibc's inet_aton."""
    o = address.packed
    n = int(address)
    return {
        "dotted": str(address),
        "decimal": str(n),
        "octal": ".".join(f"0{byte:o}" for byte in o),
        "hex": f"0x{n:x}",
        "dotted hex": ".".join(f"0x{byte:X}" for byte in o),
        "short a.b.c": f"{o[0]}.{o[1]}.{(o[2] << 8) | o[3]}",
        "short a.b": f"{o[0]}.{n & 0xFFFFFF}",
        "mixed": f"0x{o[0]:x}.0{o[1]:o}.{(o[2] << 8) | o[3]}",
    }


def ipv6_carriers(address: ipaddress.IPv4Address) -> dict[str, ipaddress.IPv6Address]:
    """Every IPv6 encoding that carries an IPv4 address."""
    n, public = int(address), int(PUBLIC_V4)
    teredo = 0x20010000 << 96
    return {
        "IPv4-mapped": ipaddress.IPv6Address((0xFFFF << 32) | n),
        "IPv4-compatible": ipaddress.IPv6Address(n),
        "IPv4-translated": ipaddress.IPv6Address((0xFFFF << 48) | n),
        "6to4": ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1),
        "NAT64": ipaddress.IPv6Address((0x64FF9B << 96) | n),
        "local-use NAT64": ipaddress.IPv6Address((0x64FF9B0001 << 80) | n),
        # The other end public: the address under test alone must refuse.
        "Teredo server": ipaddress.IPv6Address(teredo | (n << 64) | (~public & LOW_32)),
        "Teredo client": ipaddress.IPv6Address(teredo | (public << 64) | (~n & LOW_32)),
    }


def _case_id(block: Block, address: IPAddress, form: str = "") -> str:
    return f"{block.network} {block.name} {address} {form}".strip()


V4_CASES = [(b, a) for b in IPV4 for a in _own_addresses(b)]
V6_CASES = [(b, a) for b in IPV6 for a in _own_addresses(b)]
V4_SPELLINGS = [
    pytest.param(address, host, id=_case_id(block, address, form))
    for block, address in V4_CASES
    for form, host in ipv4_spellings(address).items()  # type: ignore[arg-type]
]
V4_IN_V6 = [
    pytest.param(address, carrier, id=_case_id(block, address, encoding))
    for block, address in V4_CASES
    for encoding, carrier in ipv6_carriers(address).items()  # type: ignore[arg-type]
]
V6_REFUSED = [
    pytest.param(address, id=_case_id(block, address))
    for block, address in V6_CASES
    if block.refused
]
EVERY_REFUSED = [
    pytest.param(address, id=_case_id(block, address))
    for block, address in V4_CASES + V6_CASES
    if block.refused
]


@pytest.fixture(autouse=True)
def no_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """An address literal is read here, never handed to the resolver."""

    def refuse(*args: Any, **kwargs: Any) -> list[Any]:
        raise AssertionError(f"the resolver was asked: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def resolves_to(monkeypatch: pytest.MonkeyPatch, *answers: str) -> None:
    def fake(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        assert host == NAME
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in answers
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.mark.parametrize(("address", "host"), V4_SPELLINGS)
def test_every_ipv4_block_is_refused_in_every_spelling_of_its_addresses(
    address: ipaddress.IPv4Address, host: str
) -> None:
    with pytest.raises(OutboundRefused) as refused:
        url_vet(f"http://{host}:8080/hook")
    # Judged as the address the OS would connect to.
    assert f"{address} is " in refused.value.reason


@pytest.mark.parametrize(("address", "carrier"), V4_IN_V6)
def test_every_ipv4_block_is_refused_inside_every_ipv6_encoding(
    address: ipaddress.IPv4Address, carrier: ipaddress.IPv6Address
) -> None:
    with pytest.raises(OutboundRefused) as refused:
        url_vet(f"https://[{carrier}]/hook")
    if unwrap(carrier):  # :: and ::1 are refused as themselves
        assert f"carries {address}" in refused.value.reason


@pytest.mark.parametrize("address", V6_REFUSED)
def test_every_refused_ipv6_block_is_refused_as_written(address: IPAddress) -> None:
    with pytest.raises(OutboundRefused):
        url_vet(f"https://[{address}]:8443/hook")


@pytest.mark.parametrize("prefix", ["::ffff:0:0/96", "64:ff9b::/96"])
def test_an_ipv6_spelling_of_an_ipv4_address_is_judged_as_that_address(
    prefix: str,
) -> None:
    block = block_of(ipaddress.ip_network(prefix).network_address)
    assert block is not None and block.verdict is Verdict.EMBEDDED
    base = int(block.network.network_address)
    public = ipaddress.IPv6Address(base | int(PUBLIC_V4))
    private = ipaddress.IPv6Address(base | int(ipaddress.IPv4Address("10.0.0.5")))
    assert url_vet(f"https://[{public}]/").address == str(public)
    with pytest.raises(OutboundRefused, match=r"carries 10\.0\.0\.5"):
        url_vet(f"https://[{private}]/")


@pytest.mark.parametrize("address", EVERY_REFUSED)
def test_a_name_resolving_into_any_refused_block_is_refused(
    address: IPAddress, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolves_to(monkeypatch, str(PUBLIC_V4), str(address))
    with pytest.raises(OutboundRefused, match=f"^{NAME}: "):
        url_vet(f"https://{NAME}/hook")


@pytest.mark.parametrize(("form", "host"), ipv4_spellings(PUBLIC_V4).items())
def test_a_public_ipv4_address_is_accepted_in_every_spelling_and_pinned(
    form: str, host: str
) -> None:
    target = url_vet(f"https://{host}/hook")
    assert target.address == str(PUBLIC_V4), form


@pytest.mark.parametrize(
    ("encoding", "accepted"),
    [
        ("IPv4-mapped", True),  # the socket connects to 8.8.8.8 itself
        ("NAT64", True),  # an IPv6-only network's gateway to 8.8.8.8
        # Deprecated or local: where they lead is a relay's or translator's
        # choice, not the address's, and no receiver is reached this way.
        ("IPv4-compatible", False),
        ("IPv4-translated", False),
        ("6to4", False),
        ("local-use NAT64", False),
        ("Teredo server", False),
        ("Teredo client", False),
    ],
)
def test_a_public_ipv4_address_inside_ipv6_is_accepted_only_where_really_public(
    encoding: str, accepted: bool
) -> None:
    carrier = ipv6_carriers(PUBLIC_V4)[encoding]
    assert (address_refusal(str(carrier)) is None) is accepted
    if accepted:
        assert url_vet(f"https://[{carrier}]/").address == str(carrier)


def test_a_public_ipv6_address_is_accepted_as_a_literal_and_as_an_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert url_vet(f"https://[{PUBLIC_V6}]/").address == str(PUBLIC_V6)
    resolves_to(monkeypatch, str(PUBLIC_V6), str(PUBLIC_V4))
    target = url_vet(f"https://{NAME}/hook")
    assert (target.host, target.address) == (NAME, str(PUBLIC_V6))


def test_the_reported_findings_are_refused() -> None:
    """Issue 28: each was saved and delivered."""
    for address, said in [
        ("64:ff9b:1::a00:5", "carries 10.0.0.5 (local-use NAT64)"),
        ("::a00:5", "carries 10.0.0.5 (IPv4-compatible)"),
        ("::ffff:0:a00:5", "carries 10.0.0.5 (IPv4-translated)"),
        ("fec0::1", "fec0::/10 Site-Local (deprecated)"),
    ]:
        assert said in (address_refusal(address) or ""), address
    # Refused for the prefix alone, whatever it carries.
    assert "64:ff9b:1::/48" in (address_refusal("64:ff9b:1::808:808") or "")


def test_teredo_is_unwrapped_as_rfc_4380_lays_it_out() -> None:
    # RFC 4380 §4's example: server 65.54.227.120, client 192.0.2.45.
    ip = ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:3fff:fdd2")
    assert [(e, str(a)) for e, a in unwrap(ip)] == [
        ("Teredo server", "65.54.227.120"),
        ("Teredo client", "192.0.2.45"),
    ]


def test_an_admitted_private_range_is_admitted_in_its_ipv4_spellings_only(
    settings: Any,
) -> None:
    settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    private = ipaddress.IPv4Address("10.0.0.5")
    carriers = ipv6_carriers(private)
    assert address_refusal(str(private)) is None
    assert address_refusal(str(carriers["IPv4-mapped"])) is None
    # The admitted range does not admit the tunnel it is wrapped in.
    assert "2002::/16 6to4" in (address_refusal(str(carriers["6to4"])) or "")
    settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8", "64:ff9b:1::/48"]
    assert address_refusal(str(carriers["local-use NAT64"])) is None
    # Nothing admits what reaches this host, however it is wrapped.
    loopback = ipv6_carriers(ipaddress.IPv4Address("127.0.0.1"))["local-use NAT64"]
    assert "is loopback" in (address_refusal(str(loopback)) or "")


@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
def test_ipv4_literals_are_read_exactly_as_inet_aton_reads_them(host: str) -> None:
    try:
        expected: str | None = socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        expected = None
    literal = ipv4_literal(host)
    assert (str(literal) if literal else None) == expected


def test_a_name_the_resolver_reads_as_an_address_is_judged_as_that_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Full-width digits are no literal to us; the resolver reads them (IDNA
    maps them to ASCII) as 127.0.0.1, and that answer is what is judged."""

    def numeric_only(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        # The real resolver, kept off the network: numeric reading only.
        return REAL_GETADDRINFO(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )

    monkeypatch.setattr(socket, "getaddrinfo", numeric_only)
    with pytest.raises(OutboundRefused, match=r"127\.0\.0\.1 is loopback"):
        url_vet("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/")


def test_the_table_has_each_block_once_and_each_embedding_prefix_unwraps() -> None:
    networks = [b.network for b in IPV4 + IPV6]
    assert len(networks) == len(set(networks))
    for block in IPV6:
        if block.verdict is Verdict.EMBEDDED:
            assert unwrap(block.network.network_address + 0x08080808)


def test_docs_security_lists_the_table_row_for_row() -> None:
    """docs/security.md repeats the policy; it may not drift from it."""
    text = Path(__file__).parents[2].joinpath("docs/security.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| [^|]+ \| [^|]+ \| (\w+) \|", text, re.M)
    shown = {"REFUSED": "yes", "NEVER": "always", "EMBEDDED": "embedded"}
    assert sorted(rows) == sorted(
        (str(b.network), shown[b.verdict.name]) for b in IPV4 + IPV6
    )
