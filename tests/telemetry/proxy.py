"""A tiny loopback HTTP proxy in front of Prometheus that misbehaves on cue."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote_plus

import requests


class Proxy:
    """Forwards GETs to ``upstream``; ``delay_s`` sleeps before answering,
    ``fail_after`` answers 503 from that request on, ``die_after`` closes the
    listening socket (Prometheus killed) after that many requests."""

    def __init__(
        self,
        upstream: str,
        *,
        delay_s: float = 0.0,
        fail_after: int | None = None,
        die_after: int | None = None,
    ) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.fail_after = fail_after
        self.die_after = die_after
        self.count = 0
        self.paths: list[str] = []  # every request's path and query, unquoted
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with proxy.lock:
                    proxy.count += 1
                    proxy.paths.append(unquote_plus(self.path))
                    n = proxy.count
                if proxy.die_after is not None and n > proxy.die_after:
                    threading.Thread(target=proxy.close, daemon=True).start()
                    self.close_connection = True
                    self.connection.close()
                    return
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                if proxy.fail_after is not None and n > proxy.fail_after:
                    body = b"upstream unavailable"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                r = requests.get(proxy.upstream + self.path, timeout=30)
                try:
                    self.send_response(r.status_code)
                    self.send_header("Content-Type", r.headers.get("Content-Type", ""))
                    self.send_header("Content-Length", str(len(r.content)))
                    self.end_headers()
                    self.wfile.write(r.content)
                except OSError:
                    pass  # the client gave up (timeout test): nothing to tell

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
