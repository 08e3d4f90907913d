"""A webhook receiver on a private address inside a network namespace the
test creates, for processes of the product that run outside the test.

costapp's outbound guard never connects to loopback (only a test's own
settings override may, in-process), so a worker started as compose starts it
can only page a receiver on an address ``COSTAPP_WEBHOOK_ALLOWED_NETWORKS``
admits. The namespace holds that address on one end of a veth pair; this
host holds the other, so the route is the link itself and nothing leaves the
machine. The receiver verifies each request's Standard Webhooks signature
with the reference package and writes one JSON line per request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.services import ROOT, missing, stop, wait_for


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class NamespacedReceiver:
    url: str
    network: str  # the CIDR to allow
    log: Path
    # Seconds the senders' clock is ahead of the real one (libfaketime): the
    # receiver judges webhook-timestamp by their clock.
    clock_offset: Path

    def received(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


@contextmanager
def receiver_in_namespace(tmp: Path, *, secret: str) -> Iterator[NamespacedReceiver]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        missing("root and iproute2 (ip netns) for a receiver on a private address")
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"costapp-{tag}", f"cah{tag}", f"can{tag}"
    # A /30 of 10.200.0.0/16 per test, so parallel tests never share one.
    third, fourth = int(tag[:2], 16), (int(tag[2:4], 16) % 64) * 4
    host_ip, ns_ip = f"10.200.{third}.{fourth + 1}", f"10.200.{third}.{fourth + 2}"
    network = f"10.200.{third}.{fourth}/30"
    log = tmp / "received.jsonl"
    offset = tmp / "receiver-clock-offset"
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        missing(f"network namespaces ({exc.stderr.strip()})")
    proc: subprocess.Popen[bytes] | None = None
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        port = 8080
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-m",
                "tests.support.webhook_receiver",
                "--bind",
                ns_ip,
                "--port",
                str(port),
                "--log",
                str(log),
                "--clock-offset-file",
                str(offset),
            ],
            cwd=ROOT,
            env={**os.environ, "WEBHOOK_SECRET": secret, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "receiver.err").open("w"),
        )
        ready = tmp / "received.jsonl.ready"
        wait_for(ready.exists, timeout=30, what="the webhook receiver")
        yield NamespacedReceiver(f"http://{ns_ip}:{port}/hook", network, log, offset)
    finally:
        if proc is not None:
            stop(proc)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
