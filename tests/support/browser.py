"""The README's demo server and headless Chromium, for the browser tests
(tests/fleet/test_browser.py and tests/browser).

The server is the command scripts/demo.sh runs, minus the venv bootstrap:
``manage.py demo --serve`` on a temporary SQLite file. Under CI=true a missing
Chromium, chromedriver or selenium fails (tests/support/services.py
``missing``).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import (
    PYTHON,
    ROOT,
    free_port,
    missing,
    port_open,
    require_binary,
    stop,
    wait_for,
)

CHROMEDRIVER = "/usr/bin/chromedriver"


class DemoServer:
    def __init__(
        self, proc: subprocess.Popen[str], port: int, db: Path, env: dict[str, str]
    ) -> None:
        self.proc = proc
        self.port = port
        self.db = db
        self.env = env
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def password(self) -> str | None:
        for line in self.lines:
            m = re.search(r"user: demo\s+password: (\S+)", line)
            if m:
                return m.group(1)
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def demo_serving(tmp: Path, *, days: int) -> Iterator[DemoServer]:
    """``manage.py demo --serve --days days`` with its database and files in
    ``tmp``, once it listens; stopped afterwards."""
    db = tmp / "demo.sqlite3"
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "COSTAPP_DEMO": "true",
        "DEBUG": "false",
        "COSTAPP_VAR_DIR": str(tmp),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [PYTHON, "manage.py", "demo", "--serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--days", str(days)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = DemoServer(proc, port, db, env)
    try:
        wait_for(
            lambda: proc.poll() is not None or port_open(port),
            timeout=240,
            what="manage.py demo --serve",
        )
        if proc.poll() is not None:
            pytest.fail("manage.py demo exited:\n" + "".join(server.lines))
        yield server
    finally:
        stop(proc)


def require_browser() -> None:
    """Skip (fail under CI) without selenium, chromedriver or Chromium."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing("selenium (pip install -r requirements-dev.txt)")
    if not Path(CHROMEDRIVER).exists():
        missing(f"chromedriver at {CHROMEDRIVER}")
    require_binary("chromium")


def chrome(
    width: int = 1440, height: int = 1000, *, hide_scrollbars: bool = True
) -> Any:
    """A headless Chromium of its own profile, its console kept for
    ``get_log("browser")``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    profile = tempfile.mkdtemp(prefix="costapp-chromium-")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        *(["--hide-scrollbars"] if hide_scrollbars else []),
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    # Console messages, Content-Security-Policy violations among them.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_window_size(width, height)
    return driver
