"""The budgets page and the API's budgets endpoint, with the month forecasts
stored (``MonthForecastFigure``) against computed per request (the stored rows
deleted: ``month_forecast_read`` then simulates as it did before they existed).

Seeds the demo fleet into ``DATABASE_URL`` (its demo tables are emptied first,
so never point it at real data): ``--days`` of demo data ending ``--end`` (mid-month:
the forecast simulates the rest of the month), the recompute, and budgets for the fleet, two teams and a
deployment. Requests go through Django's test client in this process; each
page's median of ``--repeat`` requests is given with its ratio to a trivial
authenticated page (``/home/``) measured in the same run.

    DATABASE_URL=postgres://.../scratch .venv/bin/python bench/bench_budgets.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from costapp.api.tokens import api_token_create  # noqa: E402
from costapp.economics.budgets import budget_upsert  # noqa: E402
from costapp.economics.unit_costs.services import unit_costs_recompute  # noqa: E402
from costapp.fleet.demo_setup import (  # noqa: E402
    demo_fleet_load,
    demo_ingest,
    rate_card_seed,
)
from costapp.models import Budget, Deployment, MonthForecastFigure  # noqa: E402
from tests.support.demo_data import demo_tables_wipe  # noqa: E402


def seed(days: int, end: datetime) -> None:
    call_command("migrate", interactive=False, verbosity=0)
    demo_tables_wipe()
    Budget.objects.all().delete()
    demo_fleet_load(end=end)
    rate_card_seed()
    demo_ingest(end=end, days=days)
    teams = sorted(set(Deployment.objects.values_list("team", flat=True)))[:2]
    deployment = Deployment.objects.order_by("name").values_list("name", flat=True)[0]
    budget_upsert(scope="fleet", name="fleet", monthly_amount=Decimal(200000))
    for team in teams:
        budget_upsert(scope="team", name=team, monthly_amount=Decimal(50000))
    budget_upsert(scope="deployment", name=deployment, monthly_amount=Decimal(9000))
    started = time.perf_counter()
    unit_costs_recompute(now=datetime.now(UTC))
    print(f"recompute (forecasts included): {time.perf_counter() - started:.1f} s")


def timed(client: Client, url: str, repeat: int, **headers: str) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, **headers)  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
        assert response.status_code in (200, 302), (url, response.status_code)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-seed", action="store_true")
    # Mid-month by default: on the last day of a month nothing is simulated.
    parser.add_argument("--end", default="2026-11-16", help="UTC day the data ends")
    args = parser.parse_args()
    if not args.no_seed:
        seed(args.days, datetime.fromisoformat(args.end).replace(tzinfo=UTC))
    user, _ = User.objects.get_or_create(username="bench-budgets", is_superuser=True)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    token = api_token_create(
        user=user, name="bench", scopes=["api"],
        expires_at=datetime.now(UTC) + timedelta(days=1),
    ).secret  # fmt: skip
    api = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    print(f"budgets: {Budget.objects.count()}")
    stored = list(MonthForecastFigure.objects.all())
    for label in ("stored", "computed per request"):
        if label != "stored":
            MonthForecastFigure.objects.all().delete()
        timed(client, "/economics/budgets/", 1)  # warm
        floor = timed(client, "/home/", args.repeat)
        page = timed(client, "/economics/budgets/", args.repeat)
        endpoint = timed(client, "/api/v1/budgets/", args.repeat, **api)
        print(
            f"{label}: trivial {floor:.1f} ms; budgets page {page:.1f} ms "
            f"({page / floor:.1f}x); API budgets {endpoint:.1f} ms "
            f"({endpoint / floor:.1f}x)"
        )
    MonthForecastFigure.objects.bulk_create(stored)


if __name__ == "__main__":
    main()
