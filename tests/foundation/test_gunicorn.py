"""A streamed response longer than ``GUNICORN_TIMEOUT`` arrives whole with the
compose file's gunicorn settings (threaded workers), where a sync worker is
killed halfway: why a long finance export does not die at the web server's
timeout (costapp/gunicorn_conf.py)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.services import free_port, stop, wait_for
from tests.support.slow_stream import LINES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration


def streamed_lines(*extra: str) -> int:
    """Lines of a 4.8 s stream read through gunicorn with a 2 s timeout."""
    port = free_port()
    proc = subprocess.Popen(
        [str(BIN / "gunicorn"), "tests.support.slow_stream:app",
         "--config", "costapp/gunicorn_conf.py", *extra],
        cwd=ROOT,
        env={"PATH": str(BIN), "GUNICORN_BIND": f"127.0.0.1:{port}",
             "GUNICORN_WORKERS": "1", "GUNICORN_TIMEOUT": "2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def up() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.connect()
            conn.close()
            return True

        wait_for(up, timeout=30, what="gunicorn")
        lines = 0
        try:
            url = f"http://127.0.0.1:{port}/"
            with urllib.request.urlopen(url, timeout=10) as response:
                for _ in response:
                    lines += 1
        except (http.client.IncompleteRead, ConnectionError):
            pass  # the worker was killed mid-stream
        return lines
    finally:
        stop(proc)


def test_a_stream_longer_than_the_timeout_arrives_whole() -> None:
    assert streamed_lines() == LINES


def test_a_sync_worker_would_have_cut_it() -> None:
    # (gunicorn turns a sync worker with threads into gthread: one thread.)
    assert streamed_lines("--worker-class", "sync", "--threads", "1") < LINES
