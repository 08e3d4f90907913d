"""Outbound HTTP for webhooks and Slack, guarded against request forgery.

- Only http and https; redirects are never followed (a 3xx is a failure).
- A host written as an IPv4 address in any spelling the OS accepts
  (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``) is read as the OS
  reads it and never sent to DNS; a name must resolve, and every address it
  resolves to must pass.
- An address passes unless its block in ``addresses`` (IANA's
  special-purpose registries, as data) refuses it; an IPv6 address is also
  judged by every IPv4 address it carries (``unwrap``).
- ``COSTAPP_WEBHOOK_ALLOWED_NETWORKS`` admits named private ranges for
  on-premises receivers; loopback, link-local and "this host" never pass.
- The connection is made to the vetted address itself (the Host header and
  TLS SNI/certificate check keep the name), at send time: a name re-resolved
  between check and connect (DNS rebinding) cannot change where we connect.
- urllib3 is used directly, so no proxy variable from the environment applies.
- A failure is named as it happened: refused, timed out, unresolvable, TLS.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

from costapp.alerts.addresses import Block, IPAddress, Verdict, block_of

NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
TEREDO = ipaddress.ip_network("2001::/32")
LOW_32 = 0xFFFFFFFF
# What the test-only COSTAPP_OUTBOUND_TEST_LOOPBACK opens.
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
# inet_aton's parts: 0x-hex, 0-octal, decimal; ASCII only (``\d`` is Unicode).
IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*", re.ASCII)


class _PathRedacted(logging.Filter):
    """urllib3 logs each request line at DEBUG; a Slack URL's path is its
    credential, so the path never reaches a log handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(args, tuple)
            and len(args) >= 5
            and '"%s %s %s"' in str(record.msg)
        ):
            record.args = (*args[:4], "/…", *args[5:])
        return True


logging.getLogger("urllib3.connectionpool").addFilter(_PathRedacted())


class OutboundRefused(Exception):
    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{reason}")


class OutboundFailed(Exception):
    """The connection failed or timed out (retried by the delivery task)."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        self.timeout = timeout
        super().__init__(message)


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str
    address: str


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    duration_ms: int


def ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """The address ``host`` names when the OS reads it as an IPv4 literal
    (glibc's ``inet_aton``: one to four parts, the last filling the bytes
    left), else None. ``ipaddress`` reads only the dotted-quad form."""
    parts = host.split(".")
    if len(parts) > 4 or not all(IPV4_PART.fullmatch(part) for part in parts):
        return None
    values = [_ipv4_part(part) for part in parts]
    *leading, last = values
    if any(value > 0xFF for value in leading) or last >= 1 << 8 * (5 - len(values)):
        return None
    number = last
    for index, value in enumerate(leading):
        number |= value << 8 * (3 - index)
    return ipaddress.IPv4Address(number)


def _ipv4_part(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part, 16)
    if part.startswith("0"):
        return int(part, 8)
    # Past 10 digits it is too large anyway, and int() refuses 4300 digits.
    return int(part) if len(part) <= 10 else 1 << 32


def unwrap(ip: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """Every IPv4 address an IPv6 address carries, with its encoding."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    number = int(ip)
    low = ipaddress.IPv4Address(number & LOW_32)
    if ip in IPV4_MAPPED:
        return [("IPv4-mapped", low)]
    if ip in IPV4_TRANSLATED:
        return [("IPv4-translated", low)]
    if ip in IPV4_COMPATIBLE and number > 1:  # :: and ::1 are themselves
        return [("IPv4-compatible", low)]
    if ip in NAT64:
        return [("NAT64", low)]
    if ip in NAT64_LOCAL_USE:
        # RFC 6052 lets the operator pick where a local-use prefix puts the
        # IPv4 address; the /96 layout is read (the prefix is refused anyway).
        return [("local-use NAT64", low)]
    if ip in SIX_TO_FOUR:
        return [("6to4", ipaddress.IPv4Address((number >> 80) & LOW_32))]
    if ip in TEREDO:
        # RFC 4380 §4: the server in bits 32-63, the client obfuscated
        # (inverted) in the last 32 bits.
        return [
            ("Teredo server", ipaddress.IPv4Address((number >> 64) & LOW_32)),
            ("Teredo client", ipaddress.IPv4Address(~number & LOW_32)),
        ]
    return []


def address_refusal(raw: str) -> str | None:
    """Why this address may not be connected to, or None when it may."""
    ip = ipaddress.ip_address(raw.split("%", 1)[0])
    judged: list[tuple[str, IPAddress]] = [*unwrap(ip), ("", ip)]
    for encoding, address in judged:
        block = block_of(address)
        if block is None or not block.refused or _admitted(address, block):
            continue
        carried = f"{raw} carries {address} ({encoding}): " if encoding else ""
        return carried + _refusal(address, block)
    return None


def _admitted(address: IPAddress, block: Block) -> bool:
    if block.verdict is Verdict.NEVER:
        return block.network in LOOPBACK and bool(
            settings.COSTAPP_OUTBOUND_TEST_LOOPBACK
        )
    return any(
        address in ipaddress.ip_network(net, strict=False)
        for net in settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS
    )


def _refusal(address: IPAddress, block: Block) -> str:
    which = f"{block.network} {block.name}, {block.rfc}"
    if block.verdict is Verdict.NEVER:
        return f"{address} is loopback, link-local or unspecified ({which})"
    return (
        f"{address} is not a public address ({which}; "
        "COSTAPP_WEBHOOK_ALLOWED_NETWORKS admits private ranges)"
    )


def url_vet(url: str) -> Target:
    """Resolve and check a URL; raises OutboundRefused naming the reason,
    OutboundFailed when the name does not resolve (it may tomorrow)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(url, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise OutboundRefused(url, f"scheme {parts.scheme!r}: only http and https")
    host = parts.hostname
    if not host:
        raise OutboundRefused(url, "no host")
    if parts.username or parts.password:
        raise OutboundRefused(url, "credentials in the URL are not allowed")
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = _addresses(url, host, port)
    for address in addresses:
        # Every answer must pass: a resolver may hand out any of them.
        if reason := address_refusal(address):
            raise OutboundRefused(url, f"{host}: {reason}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, host, port, path, addresses[0])


def _addresses(url: str, host: str, port: int) -> list[str]:
    if ":" in host:  # urlsplit took it from brackets: an IPv6 literal
        try:
            return [str(ipaddress.IPv6Address(host.split("%", 1)[0]))]
        except ValueError:
            raise OutboundRefused(url, f"{host}: not an IPv6 address") from None
    if (literal := ipv4_literal(host)) is not None:
        return [str(literal)]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:
        raise OutboundRefused(url, f"{host}: not a host name ({exc})") from None
    except socket.gaierror as exc:
        raise OutboundFailed(f"cannot resolve {host} ({exc.strerror or exc})") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise OutboundFailed(f"cannot resolve {host} (no address)")
    return addresses


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> Response:
    target = url_vet(url)
    default = 443 if target.scheme == "https" else 80
    host_header = target.host if ":" not in target.host else f"[{target.host}]"
    if target.port != default:
        host_header += f":{target.port}"
    pool: urllib3.HTTPConnectionPool
    kw = {
        "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        "retries": False,
        "maxsize": 1,
    }
    if target.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            target.address,
            target.port,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            **kw,  # type: ignore[arg-type]
        )
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, **kw)  # type: ignore[arg-type]
    where = _where(target)
    started = time.monotonic()
    try:
        raw = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers={**headers, "Host": host_header},
            redirect=False,
            retries=False,
            assert_same_host=False,
        )
    except urllib3.exceptions.NewConnectionError as exc:
        # Before the timeout branch: urllib3 makes NewConnectionError a
        # ConnectTimeoutError, and a refusal once read "timed out after 10 s".
        raise OutboundFailed(_connect_failure(exc, where)) from exc
    except urllib3.exceptions.ConnectTimeoutError as exc:
        raise OutboundFailed(
            f"timed out after {timeout:g} s connecting to {where}", timeout=True
        ) from exc
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise OutboundFailed(
            f"timed out after {timeout:g} s waiting for {where} to answer",
            timeout=True,
        ) from exc
    except urllib3.exceptions.SSLError as exc:
        raise OutboundFailed(f"TLS error: {_tls_reason(exc)}") from exc
    except urllib3.exceptions.ProtocolError as exc:
        cause = exc.args[-1] if exc.args else exc
        raise OutboundFailed(f"connection to {where} lost: {cause}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise OutboundFailed(
            f"connection to {where} failed: {type(exc).__name__}"
        ) from exc
    finally:
        pool.close()
    return Response(
        status=raw.status,
        headers={k.lower(): v for k, v in raw.headers.items()},
        body=raw.data[:4096],
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _where(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    if target.address in (target.host, target.host.split("%", 1)[0]):
        return f"{host}:{target.port}"
    return f"{host}:{target.port} ({target.address})"


def _connect_failure(exc: urllib3.exceptions.NewConnectionError, where: str) -> str:
    cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(cause, OSError) and cause.strerror:
        return f"cannot connect to {where}: {cause.strerror}"
    return f"cannot connect to {where}"


def _tls_reason(exc: urllib3.exceptions.SSLError) -> str:
    cause = exc.args[0] if exc.args else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message}"
    # "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)"
    return re.sub(r" \(_ssl\.c:\d+\)$", "", str(cause))
