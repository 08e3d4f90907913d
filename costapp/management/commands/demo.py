from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.servers import basehttp
from django.core.wsgi import get_wsgi_application
from django.db import transaction

from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.services import secrets_rotate
from costapp.celery import beat_in_process
from costapp.days import day_start
from costapp.fleet.demo_setup import (
    DEMO_FLEET,
    demo_fleet_load,
    demo_ingest,
    demo_user_ensure,
    rate_card_seed,
)
from costapp.management.followups import followups_run_or_queue
from costapp.models import IngestRun, UnitCostFigure
from costapp.pipeline.change import Change
from costapp.pipeline.runs import run_followups
from costapp.pipeline.services import leases_clear, pipeline_request
from costapp.pipeline.steps import ENTRY_STEPS


class Command(BaseCommand):
    help = (
        "Set up the demo: migrate, load the demo fleet, seed the rate card, ingest "
        "DAYS of demo telemetry and bills ending today (UTC), create the 'demo' "
        "user; with --serve, serve the app."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=90)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--serve", action="store_true", help="then serve the app")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--force", action="store_true", help="ingest even if already loaded"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if not 1 <= days <= 400:
            raise CommandError(f"--days {days}: must be between 1 and 400")
        call_command("migrate", interactive=False, verbosity=0)
        # A demo database from before the demo had its own key (settings.py):
        # its channel secrets move from the development key to this one.
        rotated = secrets_rotate()
        if rotated.moved:
            self.stdout.write(
                f"{sum(rotated.moved.values())} channel(s) re-encrypted under the "
                "demo's own key"
            )
        # The demo ends at today's UTC midnight: the last full day is yesterday.
        end = day_start(datetime.now(UTC))
        with transaction.atomic():
            demo_fleet_load(end=end)
            alert_rules_load(path=DEMO_FLEET)
        rate_card_seed()
        if settings.CELERY_TASK_ALWAYS_EAGER:
            # Embedded: no other process runs steps, so no lease is live.
            leases_clear()
        done = IngestRun.objects.filter(
            source="demo",
            status=IngestRun.SUCCEEDED,
            window_end=end,
            params__days=days,
            params__seed=options["seed"],
        ).exists()
        steps: list[str] = []
        if done and not options["force"]:
            self.stdout.write(f"demo data for {days} days to {end:%Y-%m-%d} is loaded")
        else:
            started = time.perf_counter()
            run = demo_ingest(end=end, days=days, seed=options["seed"])
            if run.status != IngestRun.SUCCEEDED:
                raise CommandError(f"demo ingest {run.status}: {run.error}")
            self.stdout.write(
                f"demo data: {run.rows_written} rows for {days} days to "
                f"{end:%Y-%m-%d} in {time.perf_counter() - started:.1f} s"
            )
            # The story (incident, holiday) is told through the stored
            # figures: what follows the data, as after any ingest.
            steps = run_followups(run)
        if not steps and not UnitCostFigure.objects.exists():
            steps = pipeline_request(steps=ENTRY_STEPS["both"], change=Change())
        followups_run_or_queue(steps, self.stdout)
        flagged = UnitCostFigure.objects.exclude(flag="").count()
        self.stdout.write(
            f"unit costs: {UnitCostFigure.objects.count()} figures, {flagged} flagged"
        )
        credentials = demo_user_ensure(reset_password=True)
        url = f"http://{options['host']}:{options['port']}/"
        self.stdout.write(
            self.style.SUCCESS(
                f"log in as  user: {credentials.username}  "
                f"password: {credentials.password}"
            )
        )
        if not options["serve"]:
            return
        if settings.DEBUG:
            self.stdout.write(self.style.WARNING("DEBUG is on; the demo expects off"))

        # Links in alert e-mails point at this server, not the default
        # SITE_URL's port, unless the environment names a site.
        if "SITE_URL" not in os.environ:
            settings.SITE_URL = url.rstrip("/")

        def announce(_port: object) -> None:
            # Only once the socket is bound: a client that starts on this line
            # (the first-run test, a user's browser) must not be refused.
            self.stdout.write(f"serving on {url} (Ctrl-C to stop)", ending="\n")
            self.stdout.flush()

        # No broker, no beat process: the same schedule runs on a thread here.
        stop = threading.Event()
        if settings.CELERY_TASK_ALWAYS_EAGER:
            threading.Thread(
                target=beat_in_process, args=(stop,), name="beat", daemon=True
            ).start()
        try:
            basehttp.run(
                options["host"],
                options["port"],
                get_wsgi_application(),
                ipv6=False,
                threading=True,
                on_bind=announce,
                server_cls=basehttp.WSGIServer,
            )
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
