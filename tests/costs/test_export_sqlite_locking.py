"""On SQLite (the embedded demo) a finance export read slowly locks nobody
out: another user logs in within 2 s while it streams. Before, the export's
snapshot was an IMMEDIATE transaction, which holds SQLite's write lock, and
every login (each saves its session) waited 30 s for it and answered 500
"database is locked".

Its own SQLite file whatever the suite's DATABASE_URL, served the demo's way
in a subprocess (tests/support/sqlite_serving.py)."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests.support import sqlite_serving as site
from tests.support.services import PYTHON, ROOT, free_port, port_open, stop, wait_for

pytestmark = pytest.mark.integration

EXPORT = (
    f"/costs/export.csv?start={site.EXPORT_START}"
    f"&end=2026-04-01&grain=day&by=deployment&format=csv"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'costapp.sqlite3'}",
        "COSTAPP_VAR_DIR": str(tmp_path),
        "DEBUG": "false",
    }
    for name in ("DJANGO_SETTINGS_MODULE", "CELERY_BROKER_URL", "PAGE_CACHE_URL"):
        env.pop(name, None)
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "tests.support.sqlite_serving", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(
            lambda: proc.poll() is not None or port_open(port),
            timeout=60,
            what="the SQLite server",
        )
        if proc.poll() is not None:
            pytest.fail("the SQLite server exited:\n" + log.read_text())
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def log_in(base: str, username: str) -> tuple[requests.Session, float]:
    """The login page and its form, as a browser sends them; how long it
    took."""
    session = requests.Session()
    started = time.monotonic()
    page = session.get(f"{base}/login/", timeout=10)
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    response = session.post(
        f"{base}/login/",
        data={
            "username": username,
            "password": site.PASSWORD,
            "csrfmiddlewaretoken": match.group(1),
        },
        allow_redirects=False,
        timeout=10,
    )
    took = time.monotonic() - started
    assert response.status_code == 302, (response.status_code, response.text[:500])
    assert response.headers["Location"] == "/home/"
    return session, took


def unread(sock: socket.socket) -> int:
    return int(struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0" * 4))[0])


def wait_until_stalled(sock: socket.socket, timeout: float = 20) -> None:
    """Until the unread bytes stop growing for half a second."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        now = unread(sock)
        if now == last and now > 0:
            return
        last = now
        time.sleep(0.5)
    raise TimeoutError(f"the export still streams after {timeout:.0f} s")


@contextmanager
def read_slowly(base: str, session_id: str) -> Iterator[threading.Thread]:
    """The export, 1 kB every 2 s through a small receive window; the thread
    ends when the server has sent it all."""
    port = int(base.rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
    sock.connect(("127.0.0.1", port))
    sock.settimeout(10)
    sock.sendall(
        f"GET {EXPORT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Cookie: sessionid={session_id}\r\nConnection: close\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1024)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head[:300]
    # Until the server stops sending: its thread is blocked on a full socket
    # with its snapshot open, and done computing the first month's rows (the
    # GIL it holds meanwhile would slow the login, whatever the database).
    wait_until_stalled(sock)
    closing = threading.Event()

    def drip() -> None:
        while not closing.wait(2):
            if not sock.recv(1024):
                return

    reader = threading.Thread(target=drip, daemon=True)
    reader.start()
    try:
        yield reader
    finally:
        closing.set()
        sock.close()


def test_another_user_logs_in_within_2_s_while_an_export_is_read_slowly(
    server: str,
) -> None:
    exporter, _ = log_in(server, "exporter")
    with read_slowly(server, exporter.cookies["sessionid"]) as reader:
        assert reader.is_alive()
        _, took = log_in(server, "other")
        # The export was still streaming, its snapshot open, all along.
        assert reader.is_alive()
    assert took < 2, f"login took {took:.1f} s"
