"""The README's first command, exactly as a newcomer runs it: a fresh clone,
no virtual environment, no var/, ``bash scripts/demo.sh`` (plus ``--port``).
pip uses whatever index and wheel cache the machine has; five minutes at most."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support.services import ROOT, free_port

pytestmark = [pytest.mark.integration, pytest.mark.long]

LIMIT_S = 300
# Variables a newcomer's shell would not have, or that point at the test setup.
NOT_INHERITED = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "DJANGO_SETTINGS_MODULE",
    "VIRTUAL_ENV",
    "COSTAPP_VAR_DIR",
    "PYTHONPATH",
)


def test_the_readme_demo_command_serves_the_overview_on_a_fresh_clone(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "costapp"
    subprocess.run(
        ["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120
    )
    assert not (clone / "var").exists() and not (clone / ".venv").exists()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env["PATH"] = ":".join(
        p for p in env.get("PATH", "").split(":") if "/.venv/" not in p
    )
    proc = subprocess.Popen(
        ["bash", "scripts/demo.sh", "--port", str(port)],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # demo.sh execs python: stop the whole group
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    started = time.monotonic()
    try:
        while not any("serving on" in line for line in lines):
            if proc.poll() is not None:
                pytest.fail("scripts/demo.sh exited:\n" + "".join(lines[-40:]))
            if time.monotonic() - started > LIMIT_S:
                pytest.fail(f"not serving after {LIMIT_S} s:\n" + "".join(lines[-40:]))
            time.sleep(1)
        password = next(
            m.group(1)
            for line in lines
            if (m := re.search(r"user: demo\s+password: (\S+)", line))
        )
        overview = _log_in_and_open(f"http://127.0.0.1:{port}", "demo", password)
        assert 'class="kpis"' in overview
        assert overview.count('class="kpi"') >= 3
        assert "$" in overview
        assert 'id="demo-banner"' in overview  # a demo says it is one
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _log_in_and_open(base: str, username: str, password: str) -> str:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{base}/login/", timeout=30).read()
    token = next(c.value for c in jar if c.name == "csrftoken")
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    request = urllib.request.Request(
        f"{base}/login/", data=body, headers={"Referer": f"{base}/login/"}
    )
    with opener.open(request, timeout=60) as response:  # follows to the overview
        assert response.status == 200
        assert urllib.parse.urlparse(response.url).path == "/"
        return response.read().decode()
