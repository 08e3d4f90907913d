"""A real Celery worker consuming the "alerts" queue delivers an email to a
real SMTP server: the route, the queue and the task body end to end."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from costapp.alerts.services import channel_upsert
from costapp.alerts.tasks import delivery_send_task
from costapp.models import AlertRule, Delivery
from tests.alerts.conftest import event_delivery
from tests.costs.test_backfill_worker_kill import Worker, celery_broker, database_url
from tests.support.smtp import smtp_server

pytestmark = [pytest.mark.integration]
__all__ = ["celery_broker"]  # the fixture, imported for this module's tests


def test_a_worker_on_the_alerts_queue_sends_what_the_route_puts_there(
    postgres_only: None,
    transactional_db: None,
    celery_broker: str,
    tmp_path: Path,
) -> None:
    rule = AlertRule.objects.create(
        name="r", metric="cost_per_1k_requests", grain="hour", ratio=1.2
    )
    with smtp_server() as box:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": celery_broker,
            "DJANGO_SETTINGS_MODULE": "costapp.settings",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(box.port),
        }
        worker = Worker("alerts", env, tmp_path / "worker.log")
        try:
            worker.start()
            channel = channel_upsert(
                name="mail", kind="email", config={"to": ["oncall@example.com"]}
            ).channel
            delivery = event_delivery(rule, channel)
            delivery_send_task.delay(delivery.pk)  # routed by CELERY_TASK_ROUTES
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if Delivery.objects.get(pk=delivery.pk).status == "sent":
                    break
                time.sleep(0.2)
        finally:
            worker.stop()
        row = Delivery.objects.get(pk=delivery.pk)
        assert row.status == "sent", (
            row.error,
            (tmp_path / "worker.log").read_text()[-2000:],
        )
        assert row.attempts == 1
        log = (tmp_path / "worker.log").read_text()
        assert "costapp.alerts.tasks.delivery_send_task" in log and "succeeded" in log
        (message,) = box.messages
        assert message["Subject"].startswith("[costapp FIRING] chat")
