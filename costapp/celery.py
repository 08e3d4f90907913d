from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

app = Celery("costapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    [
        "costapp",
        "costapp.costs",
        "costapp.telemetry",
        "costapp.capacity",
        "costapp.fleet",
    ]
)


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    from costapp.schedule import beat_schedule

    sender.conf.beat_schedule = beat_schedule()
