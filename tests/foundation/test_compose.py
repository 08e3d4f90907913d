"""docker-compose.yml is validated here, since Docker does not run in CI."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from django.core.management import get_commands

from costapp.env import database_from_url

ROOT = Path(__file__).resolve().parents[2]
APP_SERVICES = {"migrate", "web", "worker", "live-worker", "alerts-worker", "beat"}

pytestmark = pytest.mark.smoke


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def test_it_declares_the_whole_stack(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == APP_SERVICES | {
        "postgres",
        "redis",
        "pagecache",
        "prometheus",
    }


def test_the_page_cache_redis_is_bounded_and_evicts(compose: dict[str, Any]) -> None:
    argv = command_of(compose["services"]["pagecache"])
    assert argv[argv.index("--maxmemory-policy") + 1] == "allkeys-lru"
    assert argv[argv.index("--maxmemory") + 1].endswith("mb")
    # The broker's Redis evicts nothing: a queued task is never dropped.
    assert "--maxmemory-policy" not in command_of(compose["services"]["redis"])


def test_app_services_build_from_the_one_dockerfile(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -r requirements.txt" in dockerfile
    for name in APP_SERVICES:
        service = compose["services"][name]
        assert service["build"] == ".", name
        assert service["image"] == "costapp:latest", name


def test_every_command_exists_in_the_code(compose: dict[str, Any]) -> None:
    django_commands = get_commands()
    for name in APP_SERVICES:
        argv = command_of(compose["services"][name])
        if argv[:2] == ["python", "manage.py"]:
            assert argv[2] in django_commands, (
                f"{name}: unknown manage.py command {argv[2]}"
            )
        elif argv[0] == "gunicorn":
            module, _, attr = argv[1].partition(":")
            assert (ROOT / (module.replace(".", "/") + ".py")).exists(), argv[1]
            assert attr == "application"
            config = argv[argv.index("--config") + 1]
            assert (ROOT / config).exists(), config
        elif argv[0] == "celery":
            assert argv[1:3] == ["-A", "costapp"], argv
            assert argv[3] in {"worker", "beat"}, argv
        else:
            pytest.fail(f"{name}: unexpected command {argv}")


def test_app_environment_points_at_the_compose_services(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        db = database_from_url(env["DATABASE_URL"], base_dir=ROOT)
        assert db["ENGINE"] == "django.db.backends.postgresql"
        assert (
            db["HOST"] == "postgres"
            and db["NAME"] == services["postgres"]["environment"]["POSTGRES_DB"]
        )
        assert db["USER"] == services["postgres"]["environment"]["POSTGRES_USER"]
        assert urlparse(env["CELERY_BROKER_URL"]).hostname == "redis"
        # The web workers share page bodies through their own, bounded Redis
        # (costapp/pagecache.py): LRU eviction must never reach the broker.
        assert urlparse(env["PAGE_CACHE_URL"]).hostname == "pagecache"
        assert urlparse(env["PROMETHEUS_URL"]).hostname == "prometheus"
        assert env["COSTAPP_REQUIRE_SECRET_KEY"] == "true"
        assert "AWS_ACCESS_KEY_ID" not in env, "credentials come from boto3's chain"


def test_health_checks_and_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in (
        "web",
        "worker",
        "live-worker",
        "alerts-worker",
        "postgres",
        "redis",
        "pagecache",
        "prometheus",
    ):
        assert services[name].get("healthcheck", {}).get("test"), (
            f"{name} has no healthcheck"
        )
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    for name, service in services.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert spec["condition"] in {
                "service_healthy",
                "service_completed_successfully",
            }
    for name in ("web", "worker", "live-worker", "alerts-worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )


def test_mounted_files_and_secrets_exist(compose: dict[str, Any]) -> None:
    for volume in compose["services"]["prometheus"]["volumes"]:
        source = volume.split(":", 1)[0]
        if source.startswith("./"):
            assert (ROOT / source).exists(), source
            yaml.safe_load((ROOT / source).read_text())
    # The secret key is a file each installation creates; the repository
    # never holds one (a published key protects nothing).
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    for secret in compose["secrets"].values():
        path = secret["file"].removeprefix("./")
        assert f"/{path}" in ignored, path
        assert path in readme, f"README does not say how to create {path}"


def _queue(task: str, *args: object) -> str:
    from celery import current_app

    return str(current_app.amqp.router.route({}, task, args=args)["queue"].name)


def test_each_queue_has_its_worker_and_each_task_its_queue(
    compose: dict[str, Any],
) -> None:
    """Three workers, three queues: a backfill on the ingest worker never
    delays a refresh, a recompute or a notification."""
    from costapp.pipeline.steps import STEPS
    from costapp.schedule import ENTRIES

    consumes = {
        name: (argv[argv.index("-Q") + 1].split(",") if "-Q" in argv else ["celery"])
        for name in ("worker", "live-worker", "alerts-worker")
        for argv in [command_of(compose["services"][name])]
    }
    assert consumes == {
        "worker": ["celery"],  # Celery's default: COSTAPP_INGEST_QUEUE
        "live-worker": ["live"],
        "alerts-worker": ["alerts"],
    }
    for task in (
        "costapp.alerts.tasks.delivery_send_task",
        "costapp.alerts.tasks.deliveries_reap_task",
    ):
        assert _queue(task) == "alerts", task
    for task in (
        "costapp.tasks.ingest_run_task",
        "costapp.costs.tasks.focus_import_task",
    ):
        assert _queue(task) == "celery", task
    step_task = "costapp.pipeline.tasks.pipeline_step_task"
    assert {name: _queue(step_task, name) for name in STEPS} == {
        "rollups": "celery",
        "cost_shares": "live",
        "unit_costs": "live",
        "idle": "live",
        "forecasts": "live",
        "alerts": "alerts",
        "pages": "live",
    }
    # Every beat entry goes to a queue some worker consumes.
    served = {q for queues in consumes.values() for q in queues}
    for entry in ENTRIES:
        assert _queue(entry.task) in served, entry.name
    assert _queue("costapp.telemetry.tasks.telemetry_refresh_task") == "live"
    assert _queue("costapp.telemetry.tasks.telemetry_refresh_run_task") == "live"
    assert _queue("costapp.costs.tasks.bills_refresh_task") == "live"


def test_workers_and_beat_come_back_after_a_crash(compose: dict[str, Any]) -> None:
    for name in ("worker", "live-worker", "alerts-worker", "beat"):
        assert compose["services"][name]["restart"] == "unless-stopped", name
