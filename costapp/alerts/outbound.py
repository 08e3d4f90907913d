"""Outbound HTTP for webhooks and Slack, guarded against request forgery.

- Only http and https; redirects are never followed (a 3xx is a failure).
- Every address ``getaddrinfo`` returns must be global after unwrapping
  IPv4-mapped, 6to4 and NAT64 addresses: ``is_private`` alone misses
  100.64.0.0/10 (carrier-grade NAT), which paperless-ngx's list admits.
- ``COSTAPP_WEBHOOK_ALLOWED_NETWORKS`` admits named private ranges for
  on-premises receivers; loopback, link-local and 0.0.0.0/:: never pass.
- The connection is made to the vetted address itself (the Host header and
  TLS SNI/certificate check keep the name), at send time: a name re-resolved
  between check and connect (DNS rebinding) cannot change where we connect.
- urllib3 is used directly, so no proxy variable from the environment applies.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings

NAT64 = ipaddress.ip_network("64:ff9b::/96")


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
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def unwrap(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refusal(raw: str) -> str | None:
    """Why this address may not be connected to, or None when it may."""
    ip = unwrap(ipaddress.ip_address(raw.split("%", 1)[0]))
    never = ip.is_loopback or ip.is_link_local or ip.is_unspecified
    if never and not (ip.is_loopback and settings.COSTAPP_OUTBOUND_TEST_LOOPBACK):
        return f"{raw} is loopback, link-local or unspecified"
    if ip.is_loopback or (ip.is_global and not ip.is_multicast):
        return None
    for net in settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS:
        if ip in ipaddress.ip_network(net, strict=False):
            return None
    return f"{raw} is not a public address (COSTAPP_WEBHOOK_ALLOWED_NETWORKS)"


def url_vet(url: str) -> Target:
    """Resolve and check a URL; raises OutboundRefused naming the reason."""
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
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundRefused(url, f"{host}: does not resolve ({exc})") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise OutboundRefused(url, f"{host}: does not resolve")
    for address in addresses:
        # Every answer must pass: a resolver may hand out any of them.
        if reason := address_refusal(address):
            raise OutboundRefused(url, f"{host}: {reason}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, host, port, path, addresses[0])


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
    except urllib3.exceptions.TimeoutError as exc:
        raise OutboundFailed(f"timed out after {timeout:g} s", timeout=True) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise OutboundFailed(f"connection failed: {type(exc).__name__}") from exc
    finally:
        pool.close()
    return Response(
        status=raw.status,
        headers={k.lower(): v for k, v in raw.headers.items()},
        body=raw.data[:4096],
        duration_ms=int((time.monotonic() - started) * 1000),
    )
