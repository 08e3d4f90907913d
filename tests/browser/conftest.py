"""One demo server for the browser tests, and one logged-in Chromium per role.

The server is the README's command (tests/support/browser.py
``demo_serving``); the three users are made in its database with
``manage.py shell``.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.test_browser import DAYS
from tests.support.browser import DemoServer, chrome, demo_serving, require_browser
from tests.support.services import PYTHON, ROOT, wait_for

ROLES = {"finance": "b-finance", "tech lead": "b-lead", "admin": "b-admin"}


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


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    require_browser()
    with demo_serving(tmp_path_factory.mktemp("browser-demo"), days=DAYS) as server:
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
            env=server.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield Demo(server, password, server.env)


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
            d = chrome(1440, 1000)
            self.open[role] = d
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
