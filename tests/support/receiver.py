"""A real HTTP receiver on a loopback port, for webhook and Slack tests.

It answers each request with the next scripted (status, body, delay) and
records the exact bytes and headers it received.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    script: list[tuple[int, bytes, float]]
    received: list[Received] = field(default_factory=list)
    headers_out: dict[str, str] = field(default_factory=dict)


@contextmanager
def receiver(
    script: list[tuple[int, bytes, float]] | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> Iterator[Receiver]:
    state = Receiver(url="", script=list(script or [(200, b"ok", 0.0)]))
    state.headers_out = headers or {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            state.received.append(
                Received(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
            )
            status, answer, delay = (
                state.script.pop(0) if len(state.script) > 1 else state.script[0]
            )
            if delay:
                time.sleep(delay)
            try:
                self.send_response(status)
                for k, v in state.headers_out.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except OSError:
                pass  # the client gave up (timeout tests)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Listener:
    port: int
    accepted: int = 0


@contextmanager
def listener(host: str, port: int = 0) -> Iterator[Listener]:
    """A bare TCP listener counting accepted connections (SSRF tests)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(8)
    sock.settimeout(0.1)
    state = Listener(port=sock.getsockname()[1])
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            state.accepted += 1
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(1)
        sock.close()
