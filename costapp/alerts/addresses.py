"""Which destination addresses outbound webhooks may reach, as data.

Transcribed from IANA's special-purpose address registries,

  https://www.iana.org/assignments/iana-ipv4-special-registry/
  https://www.iana.org/assignments/iana-ipv6-special-registry/

in their 2025 versions (the IPv6 one after RFC 9780 added 100:0:0:1::/64,
the IPv4 one with 192.88.99.2/32 and 192.175.48.0/24), plus the
blocks those registries leave to others: multicast, fec0::/10, the
deprecated IPv4-compatible and IPv4-translated forms, and IPv6 outside
2000::/3 (the IPv6 address-space registry). ``ipaddress``'s ``is_global`` and
``is_private`` are not used: their answers changed in patch releases
(CPython gh-113171, 2024), and a guard must not move with the interpreter.
A row IANA adds later needs a line here; the table test
(tests/alerts/test_ssrf_table.py) walks every row, and docs/security.md
repeats it.

Every special-purpose block is refused, the globally reachable ones too:
those are anycast service addresses (PCP, TURN, AMT, AS112, DNS-SD) that
reach the *nearest* instance, often the operator's own router, or
identifiers that are not locators (ORCHIDv2, DETs); no webhook receiver
lives there. The only exceptions are the two prefixes that are just another
spelling of an IPv4 address (IPv4-mapped, well-known NAT64): the IPv4 inside
is judged instead.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Verdict(enum.Enum):
    REFUSED = "refused"
    # Refused, and COSTAPP_WEBHOOK_ALLOWED_NETWORKS cannot admit it: these
    # reach this host or its link (the cloud metadata service among them).
    NEVER = "never"
    # Only a spelling of the IPv4 address inside, which is judged instead.
    EMBEDDED = "embedded"


@dataclass(frozen=True)
class Block:
    network: IPNetwork
    name: str
    rfc: str
    verdict: Verdict
    why: str

    @property
    def refused(self) -> bool:
        return self.verdict is not Verdict.EMBEDDED


def _block(cidr: str, name: str, rfc: str, verdict: Verdict, why: str) -> Block:
    return Block(ipaddress.ip_network(cidr), name, rfc, verdict, why)


REFUSED, NEVER, EMBEDDED = Verdict.REFUSED, Verdict.NEVER, Verdict.EMBEDDED
PRIVATE = "a private network: the office, the VPC"
DOCS = "documentation examples, never a host"
ANYCAST = "anycast: reaches the nearest instance, often the operator's own"
NOT_GLOBAL = "IANA: not globally reachable"
IDENTIFIER = "identifiers, not locators: routed nowhere"

# fmt: off
IPV4 = (
    _block("0.0.0.0/8", '"This network"', "RFC 791 §3.2", NEVER,
           "this host's own network, if anything"),
    _block("0.0.0.0/32", '"This host on this network"', "RFC 1122 §3.2.1.3", NEVER,
           "a connection to 0.0.0.0 reaches this host"),
    _block("10.0.0.0/8", "Private-Use", "RFC 1918", REFUSED, PRIVATE),
    _block("100.64.0.0/10", "Shared Address Space", "RFC 6598", REFUSED,
           "carrier-grade NAT: the provider's own network"),
    _block("127.0.0.0/8", "Loopback", "RFC 1122 §3.2.1.3", NEVER, "this host"),
    _block("169.254.0.0/16", "Link Local", "RFC 3927", NEVER,
           "this link; the cloud metadata service at 169.254.169.254"),
    _block("172.16.0.0/12", "Private-Use", "RFC 1918", REFUSED, PRIVATE),
    _block("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890 §2.1", REFUSED,
           NOT_GLOBAL),
    _block("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", REFUSED,
           "DS-Lite and 464XLAT inside the host or its router"),
    _block("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", REFUSED,
           "a placeholder, never a destination"),
    _block("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", REFUSED,
           ANYCAST),
    _block("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155",
           REFUSED, ANYCAST),
    _block("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 §2.2",
           REFUSED, "a name to look up, not a host"),
    _block("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 §2.2",
           REFUSED, "a name to look up, not a host"),
    _block("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", REFUSED, DOCS),
    _block("192.31.196.0/24", "AS112-v4", "RFC 7535", REFUSED, ANYCAST),
    _block("192.52.193.0/24", "AMT", "RFC 7450", REFUSED, ANYCAST),
    _block("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", REFUSED,
           "deprecated relay anycast"),
    _block("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", REFUSED,
           ANYCAST),
    _block("192.168.0.0/16", "Private-Use", "RFC 1918", REFUSED, PRIVATE),
    _block("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", REFUSED,
           ANYCAST),
    _block("198.18.0.0/15", "Benchmarking", "RFC 2544", REFUSED,
           "benchmark labs; " + NOT_GLOBAL),
    _block("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", REFUSED, DOCS),
    _block("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", REFUSED, DOCS),
    _block("240.0.0.0/4", "Reserved", "RFC 1112 §4", REFUSED,
           "reserved; routed nowhere"),
    _block("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 §7", REFUSED,
           "broadcast on this link"),
    # Not in the special-purpose registry: IANA's multicast registry.
    _block("224.0.0.0/4", "Multicast", "RFC 5771", REFUSED,
           "multicast: no TCP receiver"),
)

IPV6 = (
    _block("::/128", "Unspecified Address", "RFC 4291", NEVER,
           "a connection to :: reaches this host"),
    _block("::1/128", "Loopback Address", "RFC 4291", NEVER, "this host"),
    _block("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", EMBEDDED,
           "the socket connects to the IPv4 address itself"),
    _block("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", EMBEDDED,
           "a NAT64 gateway delivers to the IPv4 address inside"),
    _block("64:ff9b:1::/48", "IPv4-IPv6 Translat. (local-use)", "RFC 8215", REFUSED,
           "the network's own translator; " + NOT_GLOBAL),
    _block("100::/64", "Discard-Only Address Block", "RFC 6666", REFUSED,
           "a black hole by design"),
    _block("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", REFUSED,
           "a placeholder, never a destination"),
    _block("2001::/23", "IETF Protocol Assignments", "RFC 2928", REFUSED, NOT_GLOBAL),
    _block("2001::/32", "TEREDO", "RFC 4380, RFC 8190", REFUSED,
           "a tunnel: a relay, not us, picks the IPv4 host"),
    _block("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", REFUSED,
           ANYCAST),
    _block("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155",
           REFUSED, ANYCAST),
    _block("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast",
           "RFC 9665", REFUSED, ANYCAST),
    _block("2001:2::/48", "Benchmarking", "RFC 5180", REFUSED,
           "benchmark labs; " + NOT_GLOBAL),
    _block("2001:3::/32", "AMT", "RFC 7450", REFUSED, ANYCAST),
    _block("2001:4:112::/48", "AS112-v6", "RFC 7535", REFUSED, ANYCAST),
    _block("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", REFUSED,
           IDENTIFIER),
    _block("2001:20::/28", "ORCHIDv2", "RFC 7343", REFUSED, IDENTIFIER),
    _block("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
           "RFC 9374", REFUSED, IDENTIFIER),
    _block("2001:db8::/32", "Documentation", "RFC 3849", REFUSED, DOCS),
    _block("2002::/16", "6to4", "RFC 3056", REFUSED,
           "a deprecated tunnel (RFC 7526): a relay, not us, picks the IPv4 host"),
    _block("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", REFUSED,
           ANYCAST),
    _block("3fff::/20", "Documentation", "RFC 9637", REFUSED, DOCS),
    _block("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", REFUSED,
           "inside one operator's routing domain"),
    _block("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", REFUSED, PRIVATE),
    _block("fe80::/10", "Link-Local Unicast", "RFC 4291", NEVER, "this link"),
    # Not in the special-purpose registry.
    _block("::/96", "IPv4-compatible (deprecated)", "RFC 4291 §2.5.5.1", REFUSED,
           "deprecated; routed nowhere"),
    _block("::ffff:0:0:0/96", "IPv4-translated", "RFC 2765 §2.1", REFUSED,
           "only a local SIIT translator knows where it goes"),
    _block("fec0::/10", "Site-Local (deprecated)", "RFC 3879", REFUSED,
           "a private network where still in use"),
    _block("ff00::/8", "Multicast", "RFC 4291", REFUSED, "multicast: no TCP receiver"),
    # IANA hands out unicast from 2000::/3 only; the rest is the three blocks
    # below (fc00::/7, fe80::/10 and ff00::/8 above are more specific).
    _block("::/3", "Outside global unicast 2000::/3", "RFC 4291 §2.4", REFUSED,
           "unallocated: routed nowhere"),
    _block("4000::/2", "Outside global unicast 2000::/3", "RFC 4291 §2.4", REFUSED,
           "unallocated: routed nowhere"),
    _block("8000::/1", "Outside global unicast 2000::/3", "RFC 4291 §2.4", REFUSED,
           "unallocated: routed nowhere"),
)
# fmt: on

# Most specific first, so a lookup's first hit is the longest prefix.
_BY_LENGTH = {
    4: sorted(IPV4, key=lambda b: -b.network.prefixlen),
    6: sorted(IPV6, key=lambda b: -b.network.prefixlen),
}


def block_of(ip: IPAddress) -> Block | None:
    """The most specific row holding ``ip``; None for an ordinary address."""
    for block in _BY_LENGTH[ip.version]:
        if ip in block.network:
            return block
    return None
