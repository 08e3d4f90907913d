"""A WSGI app that streams for longer than the server's timeout: one line
every 0.4 s, ``LINES`` in all: 4.8 s (tests/foundation/test_gunicorn.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

LINES = 12


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    for i in range(LINES):
        yield f"line {i}\n".encode()
        time.sleep(0.4)
