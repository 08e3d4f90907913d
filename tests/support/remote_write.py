"""Samples pushed into a real Prometheus through its remote-write receiver
(``--web.enable-remote-write-receiver``), stamped by the test's clock: the
way fresh data "arrives" in a system test.

The wire format is Prometheus remote write 1.0: a ``prometheus.WriteRequest``
protobuf, snappy block-compressed. Both are written out here (a few lines
each) rather than pulling in protobuf and a snappy binding: the protobuf
messages have four fields, and a snappy block made only of literals is valid
snappy (any decoder reads it; it is merely not smaller).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import requests

Sample = tuple[int, float]  # (milliseconds since the epoch, value)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(ms: int, value: float) -> bytes:
    # value: field 1, fixed64 double; timestamp: field 2, varint int64.
    return b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(ms)


def write_request(
    series: Iterable[tuple[Mapping[str, str], Sequence[Sample]]],
) -> bytes:
    """``WriteRequest{timeseries}``; labels sorted by name, as Prometheus wants."""
    body = bytearray()
    for labels, samples in series:
        ts = b"".join(_field(1, _label(k, labels[k])) for k in sorted(labels))
        ts += b"".join(_field(2, _sample(ms, v)) for ms, v in samples)
        body += _field(1, ts)
    return bytes(body)


def snappy_block(data: bytes) -> bytes:
    """Snappy block format with literal elements only."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 1 << 16):
        chunk = data[start : start + (1 << 16)]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 1 << 8:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + n.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def push(
    url: str,
    series: Iterable[tuple[Mapping[str, str], Sequence[Sample]]],
    *,
    timeout: float = 30.0,
) -> None:
    """POST the series to ``url``/api/v1/write; raises on any refusal (an
    out-of-order or out-of-bounds sample is a bug in the test's feed)."""
    response = requests.post(
        f"{url}/api/v1/write",
        data=snappy_block(write_request(series)),
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
        timeout=timeout,
    )
    if response.status_code >= 300:
        raise RuntimeError(
            f"remote write refused: {response.status_code} {response.text}"
        )
