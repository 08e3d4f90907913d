"""The compose file's commands, run outside Docker against real services.

A scratch PostgreSQL database is created for the module; the compose `migrate`
command migrates it, then gunicorn, the Celery worker (over the real Redis
broker) and beat run with exactly the commands docker-compose.yml gives them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.support.services import free_port, scratch_database, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration


def compose_command(service: str) -> list[str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"][service]["command"]
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    # Same program, from this virtual environment.
    if argv[0] == "python":
        argv[0] = sys.executable
    elif (BIN / argv[0]).exists():
        argv[0] = str(BIN / argv[0])
    return argv


@pytest.fixture(scope="module")
def scratch_database_url() -> Iterator[str]:
    with scratch_database("costapp_compose") as url:
        yield url


@pytest.fixture(scope="module")
def app_env(
    scratch_database_url: str, redis_url: str, tmp_path_factory: Any
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=scratch_database_url,
        CELERY_BROKER_URL=redis_url,
        PAGE_CACHE_URL=redis_url,
        COSTAPP_VAR_DIR=str(tmp_path_factory.mktemp("var")),
        PYTHONPATH=str(ROOT),
    )
    migrate = subprocess.run(
        compose_command("migrate"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return env


def test_migrate_applies_every_migration(app_env: dict[str, str]) -> None:
    check = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--check"],
        cwd=ROOT,
        env=app_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_gunicorn_serves_readyz_with_the_compose_command(
    app_env: dict[str, str],
) -> None:
    port = free_port()
    env = dict(app_env, GUNICORN_BIND=f"127.0.0.1:{port}", GUNICORN_WORKERS="1")
    proc = subprocess.Popen(
        compose_command("web"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/readyz"

        def ready() -> bool:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)

        wait_for(ready, timeout=60, what="gunicorn /readyz")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            assert "/login/" in response.url  # login required
    finally:
        stop(proc)


def test_beat_starts_with_the_schedule_declared_in_code(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    argv = compose_command("beat")
    argv[argv.index("--schedule") + 1] = str(tmp_path / "beat-schedule")
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=app_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    # Read on a thread, so the wait below can end at the line, not at EOF.
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()))
    reader.start()
    try:
        # Under load beat takes longer than a fixed sleep to say it started.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any("beat: Starting" in line for line in lines):
                break
            time.sleep(0.5)
        assert proc.poll() is None, "beat exited early"
    finally:
        stop(proc)
        reader.join(timeout=10)
    output = "".join(lines)
    assert "beat: Starting" in output, output[-2000:]
    from costapp.schedule import beat_schedule

    for entry in beat_schedule().values():
        assert float(entry["options"]["expires"]) < float(entry["schedule"])  # type: ignore[call-overload,arg-type]


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def test_a_real_worker_runs_an_ingest_task_and_the_rows_land_in_postgresql(
    app_env: dict[str, str],
) -> None:
    from celery import Celery

    manage(app_env, "fleet_load", "costapp/fleet/demo_fleet.yaml")
    run_id = int(
        manage(
            app_env,
            "shell",
            "-c",
            "from datetime import datetime, UTC; "
            "from costapp.ingest import ingest_run_create; "
            "from costapp.sources.base import Window; "
            "w = Window(datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)); "
            "print(ingest_run_create(source='demo', window=w, params={'days': 2}).pk)",
        ).splitlines()[-1]
    )
    worker = subprocess.Popen(
        compose_command("worker"),
        cwd=ROOT,
        env=app_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Not the current app: shared tasks resolve through the current app, so a
    # client left current (and closed below) would take every later test's
    # tasks in this process to its broker instead of running them eagerly.
    client = Celery(broker=app_env["CELERY_BROKER_URL"], set_as_current=False)
    try:
        # An explicit connection: kombu's producer pools are process-global and
        # other tests may have closed the one for this broker URL.
        with client.connection_for_write() as conn, conn.Producer() as producer:
            client.send_task(
                "costapp.tasks.ingest_run_task", args=[run_id], producer=producer
            )

        def finished() -> bool:
            with psycopg.connect(app_env["DATABASE_URL"]) as conn:
                row = conn.execute(
                    "SELECT status FROM costapp_ingestrun WHERE id = %s", [run_id]
                ).fetchone()
            assert row is not None
            return row[0] in {"succeeded", "failed", "partial"}

        wait_for(finished, timeout=180, what="the worker to finish the ingest run")
    finally:
        stop(worker)
        client.close()
    output = worker.stdout.read() if worker.stdout else ""
    with psycopg.connect(app_env["DATABASE_URL"]) as conn:
        status, error, written = conn.execute(
            "SELECT status, error, rows_written FROM costapp_ingestrun WHERE id = %s",
            [run_id],
        ).fetchone()  # type: ignore[misc]
        hours = conn.execute(
            "SELECT count(*), count(DISTINCT deployment_id) FROM costapp_deploymenthour"
            " WHERE run_id = %s",
            [run_id],
        ).fetchone()
        bills = conn.execute(
            "SELECT count(*) FROM costapp_costline WHERE run_id = %s", [run_id]
        ).fetchone()
    assert status == "succeeded", (error, output[-3000:])
    assert "costapp.tasks.ingest_run_task" in output  # the worker, not this process
    assert hours is not None and hours[0] > 0 and hours[1] >= 3
    assert bills is not None and bills[0] > 0
    assert written > 0


def dockerfile_collectstatic() -> tuple[dict[str, str], list[str]]:
    """The Dockerfile's collectstatic line: (its environment, its argv)."""
    line = next(
        line.removeprefix("RUN ")
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("RUN ") and "collectstatic" in line
    )
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words if "=" in w and w[0].isupper())
    argv = [w for w in words if w.split("=", 1)[0] not in env]
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    return env, argv


def test_gunicorn_serves_plotly_gzipped_from_the_collected_static_files(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    import gzip
    import json

    extra, argv = dockerfile_collectstatic()
    assert extra == {"COSTAPP_STATIC_COLLECTED": "true"}
    env = dict(app_env, **extra, STATIC_ROOT=str(tmp_path / "static"))
    collect = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert collect.returncode == 0, collect.stderr[-3000:]
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())
    hashed = manifest["paths"]["plotly/plotly.min.js"]
    port = free_port()
    env.update(GUNICORN_BIND=f"127.0.0.1:{port}", GUNICORN_WORKERS="1")
    proc = subprocess.Popen(
        compose_command("web"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                return bool(response.status == 200)

        wait_for(ready, timeout=60, what="gunicorn /readyz")
        request = urllib.request.Request(
            f"{base}/static/{hashed}", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
            assert response.headers["Content-Encoding"] == "gzip"
            assert "immutable" in response.headers["Cache-Control"]
        assert len(body) <= 1_500_000, len(body)
        assert gzip.decompress(body).startswith(b"/**")
        # The login page links the hashed stylesheet.
        with urllib.request.urlopen(f"{base}/login/", timeout=5) as response:
            page = response.read().decode()
        css = manifest["paths"]["costapp/app.css"]
        assert f"/static/{css}" in page
    finally:
        stop(proc)
