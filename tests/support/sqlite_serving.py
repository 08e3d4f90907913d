"""costapp on a SQLite file, served the way the embedded demo serves it
(Django's threaded server, costapp/management/commands/demo.py), with a
finance user's export to read slowly and a second user to log in beside it
(tests/costs/test_export_sqlite_locking.py).

The listening socket's send buffer is small, and each accepted socket
inherits it: a slowly read export holds its server thread, and so its
database snapshot, from its first few kilobytes on, whatever the host's TCP
autotuning would otherwise buffer (megabytes on loopback).

    python -m tests.support.sqlite_serving PORT   (DATABASE_URL=sqlite:///...)
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as D
from typing import Any

EXPORT_START = date(2026, 1, 1)
EXPORT_DAYS = 90
DEPLOYMENTS = 10
ACCOUNT = "123456789012"
PASSWORD = "a-long-test-password-9"
SEND_BUFFER = 4096


def seed() -> None:
    """A pool of ``DEPLOYMENTS`` deployments with an hour of telemetry each
    per hour and a bill per day: an export of about one row per deployment
    and day (several hundred kB), allocated on the fly."""
    from django.contrib.auth.models import Group, User

    from costapp.models import CostLine, Deployment, DeploymentHour, Pool, RateCard

    for name in ("exporter", "other"):
        user = User.objects.create_user(name, password=PASSWORD)
        user.groups.add(Group.objects.get(name="finance"))
    pool = Pool.objects.create(
        name="p5-pool",
        instance_type="p5.48xlarge",
        gpu_type="H100-80GB",
        gpus_per_node=8,
        cost_rules=[{"usage_type": "BoxUsage:p5.48xlarge"}],
    )
    deployments = [
        Deployment.objects.create(
            name=f"d{i:02d}",
            team=f"team-{i % 3}",
            model_name="m",
            gpu_type="H100-80GB",
            pool=pool,
            instance_type="p5.48xlarge",
            account_id=ACCOUNT,
        )
        for i in range(DEPLOYMENTS)
    ]
    RateCard.objects.create(
        gpu_type="H100-80GB", instance_type="p5.48xlarge", price=D("55.04"),
        gpus_per_unit=8, effective_from=date(2025, 1, 1), source="test",
    )  # fmt: skip
    hours, lines = [], []
    for i in range(EXPORT_DAYS):
        day = datetime.combine(EXPORT_START + timedelta(days=i), datetime.min.time())
        day = day.replace(tzinfo=UTC)
        for h in range(24):
            for n, dep in enumerate(deployments):
                hours.append(
                    DeploymentHour(
                        deployment=dep,
                        hour=day + timedelta(hours=h),
                        gpu_seconds=(n + 1) * 1800,
                        requests_stop=n + 3,
                    )
                )
        lines.append(
            CostLine(
                source="cost_explorer",
                account_id=ACCOUNT,
                period_start=day,
                fetched_at=day + timedelta(days=2),
                service="EC2",
                usage_type="BoxUsage:p5.48xlarge",
                usage_quantity=24,
                usage_unit="Hrs",
                amortized_cost=D("1320.96") + i,
                unblended_cost=D("1320.96") + i,
            )
        )
    DeploymentHour.objects.bulk_create(hours, batch_size=5000)
    CostLine.objects.bulk_create(lines)


def serve(port: int) -> None:
    from django.core.servers import basehttp
    from django.core.wsgi import get_wsgi_application

    class SmallSendBuffer(basehttp.WSGIServer):
        def server_bind(self) -> None:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            super().server_bind()

    def announce(_port: Any) -> None:
        print("serving", flush=True)

    basehttp.run(
        "127.0.0.1", port, get_wsgi_application(), ipv6=False, threading=True,
        on_bind=announce, server_cls=SmallSendBuffer,
    )  # fmt: skip


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    seed()
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    main()
