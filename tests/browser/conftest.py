"""One demo server for the browser tests, and one logged-in Chromium per role.

The server is the README's command (``manage.py demo --serve`` on a SQLite
file, tests/fleet/test_browser.py's ``DemoServer``); the three users are made
in its database with ``manage.py shell``. Under CI=true a missing Chromium,
chromedriver or selenium fails (tests/support/services.py ``missing``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.test_browser import CHROMEDRIVER, DAYS, DemoServer
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

ROLES = {"finance": "b-finance", "tech lead": "b-lead", "admin": "b-admin"}


def _env(db: Path, tmp: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "COSTAPP_DEMO": "true",
        "DEBUG": "false",
        "COSTAPP_VAR_DIR": str(tmp),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


@dataclass
class Demo:
    server: DemoServer
    password: str  # of the three role users
    env: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def db(self) -> Path:
        return self.server.db


def _check_browser() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing("selenium (pip install -r requirements-dev.txt)")
    if not Path(CHROMEDRIVER).exists():
        missing(f"chromedriver at {CHROMEDRIVER}")
    require_binary("chromium")


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    _check_browser()
    tmp = tmp_path_factory.mktemp("browser-demo")
    db = tmp / "demo.sqlite3"
    port = free_port()
    env = _env(db, tmp)
    command = [PYTHON, "manage.py", "demo", "--serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--days", str(DAYS)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = DemoServer(proc, port, db)
    try:
        wait_for(
            lambda: proc.poll() is not None or port_open(port),
            timeout=240,
            what="manage.py demo --serve",
        )
        if proc.poll() is not None:
            pytest.fail("manage.py demo exited:\n" + "".join(server.lines))
        password = secrets.token_urlsafe(12)
        code = (
            "from django.contrib.auth.models import Group, User\n"
            f"for group, name in {ROLES!r}.items():\n"
            "    u, _ = User.objects.get_or_create(username=name)\n"
            f"    u.set_password({password!r}); u.save()\n"
            "    u.groups.set([Group.objects.get(name=group)])\n"
        )
        subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield Demo(server, password, env)
    finally:
        stop(proc)


def chrome() -> Any:
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
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1440,1000",
    ):
        options.add_argument(arg)
    # Console messages, Content-Security-Policy violations among them.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def login(d: Any, demo: Demo, username: str) -> None:
    from selenium.webdriver.common.by import By

    d.get(demo.url + "/login/")
    d.find_element(By.NAME, "username").send_keys(username)
    d.find_element(By.NAME, "password").send_keys(demo.password)
    d.find_element(By.CSS_SELECTOR, "form button, form [type=submit]").click()
    wait_for(lambda: "/login/" not in d.current_url, timeout=30, what="login")
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",
        timeout=30,
        what="the landing page",
    )


class Drivers:
    """One Chromium per role, logged in on first use, kept for the session."""

    def __init__(self, demo: Demo) -> None:
        self.demo = demo
        self.open: dict[str, Any] = {}

    def __getitem__(self, role: str) -> Any:
        if role not in self.open:
            d = chrome()
            self.open[role] = d
            d.set_window_size(1440, 1000)
            login(d, self.demo, ROLES[role])
        return self.open[role]

    def close(self) -> None:
        for d in self.open.values():
            d.quit()


@pytest.fixture(scope="session")
def drivers(demo: Demo) -> Iterator[Drivers]:
    found = Drivers(demo)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(params=list(ROLES))
def as_role(request: pytest.FixtureRequest, drivers: Drivers) -> tuple[str, Any]:
    """(role, a Chromium logged in as that role)."""
    return request.param, drivers[request.param]


@pytest.fixture
def finance(drivers: Drivers) -> Any:
    """The finance user's Chromium, for the figure checks."""
    return drivers["finance"]
