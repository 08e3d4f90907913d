"""``manage.py capacity_backtest --deployment chat [--days 7] [--json] [--circular]``

Today's configuration of a deployment (as the what-if page builds it) against the
same deployment's hourly telemetry: mean ITL and output tokens/s per replica at
each hour's mean running batch, and a one-sided replica check (see
``analytics.capacity.backtest``). The page and this command share
``costapp.capacity.backtest.deployment_backtest``. ``--circular`` says the
telemetry was generated from the engine itself, so agreement checks nothing
(without it, the demo's declared engine figures decide).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.capacity.backtest import Backtest
from costapp.capacity.backtest import MAX_WINDOW_DAYS, deployment_backtest, document
from costapp.models import Deployment


class Command(BaseCommand):
    help = "Back-test today's capacity prediction against the deployment's telemetry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", required=True)
        parser.add_argument("--days", type=int, default=7)
        parser.add_argument("--json", action="store_true", help="JSON on stdout")
        parser.add_argument(
            "--circular",
            action="store_true",
            default=None,
            help="the telemetry was generated from the capacity engine",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            deployment = Deployment.objects.get(name=options["deployment"])
        except Deployment.DoesNotExist:
            raise CommandError(
                f"--deployment {options['deployment']!r}: no such deployment"
            ) from None
        if not 1 <= options["days"] <= MAX_WINDOW_DAYS:
            raise CommandError(
                f"--days {options['days']}: must be 1 to {MAX_WINDOW_DAYS}"
            )
        found = deployment_backtest(
            deployment, days=options["days"], circular=options["circular"]
        )
        if found.backtest is None:
            raise CommandError("; ".join(found.problems))
        if options["json"]:
            self.stdout.write(json.dumps(document(found), indent=2))
            return
        self._print(deployment, found.backtest)

    def _print(self, deployment: Deployment, found: Backtest) -> None:
        def pct(value: float | None) -> str:
            return "—" if value is None else f"{value:+.1%}"

        self.stdout.write(
            f"{deployment.name}: ITL {pct(found.itl_error)}, throughput "
            f"{pct(found.throughput_error)}, p95 ITL {pct(found.itl_p95_error)} "
            "(predicted vs observed; "
            f"calibration {found.calibration})"
        )
        self.stdout.write(
            "hour                        batch  ITL obs  ITL pred  p95 obs  p95 pred  "
            "tok/s obs  tok/s pred  replicas"
        )
        for h in found.hours:

            def num(value: float | None, digits: int = 1) -> str:
                return "—" if value is None else f"{value:.{digits}f}"

            replicas = (
                f"{num(h.replicas_observed, 0)} obs / {h.replicas_predicted} pred "
                f"({h.replicas_verdict})"
                if h.replicas_predicted is not None
                else h.replicas_verdict
            )
            self.stdout.write(
                f"{h.hour:<27} {num(h.batch):>6} {num(h.observed_itl_ms):>8} "
                f"{num(h.predicted_itl_ms):>9} {num(h.observed_p95_ms):>8} "
                f"{num(h.predicted_p95_ms):>9} {num(h.observed_tokens_per_s):>10} "
                f"{num(h.predicted_tokens_per_s):>11}  {replicas}"
            )
        for message in found.messages:
            self.stdout.write(message)
