"""Services that set up the demo: fleet, rate card, telemetry and bills, a user."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.contrib.auth.models import Group, User

from costapp.days import day_start
from costapp.fleet.fleetfile import FleetLoadResult, fleet_file_read, fleet_load
from costapp.fleet.services import rate_card_seed
from costapp.ingest import ingest_run_create, ingest_run_execute
from costapp.models import IngestRun
from costapp.sources.demo import ENGINE_FIGURES, DemoEvents, DemoSource

logger = logging.getLogger(__name__)

DEMO_FLEET = Path(__file__).resolve().parent / "demo_fleet.yaml"
DEMO_USERNAME = "demo"
DEMO_GROUPS = ("tech lead", "finance")


@dataclass(frozen=True)
class DemoCredentials:
    username: str
    password: str | None  # None: the user existed and keeps its password


DEMO_HOLIDAY = "demo holiday"


def demo_fleet_load(*, end: datetime | None = None) -> FleetLoadResult:
    """The demo fleet, its ``demo holiday`` moved to the day the demo's
    traffic dips for a demo ending at ``end`` (default: today's UTC midnight,
    as ``manage.py demo``): the demo's events move with its end, a real fleet
    file names its days."""
    if end is None:
        end = day_start(datetime.now(UTC))
    data = fleet_file_read(DEMO_FLEET)
    holiday = DemoEvents.for_end(end).holiday
    for entry in data.get("holidays") or []:
        if entry.get("name") == DEMO_HOLIDAY:
            entry["day"] = holiday
    return fleet_load(path=DEMO_FLEET, data=data)


def demo_ingest(*, end: datetime, days: int = 90, seed: int = 7) -> IngestRun:
    """Ingest the demo telemetry and bills through the normal ingest path."""
    source = DemoSource(seed=seed, days=days, end=end)
    run = ingest_run_create(
        source="demo",
        window=source.window,
        target="demo fleet",
        # What the capacity page must not count as agreement with its engine.
        params={"seed": seed, "days": days, "engine_figures": sorted(ENGINE_FIGURES)},
    )
    return ingest_run_execute(run=run, source=source)


def demo_user_ensure(*, reset_password: bool = False) -> DemoCredentials:
    """The ``demo`` user in the tech lead and finance groups.

    A new user gets a random password (returned once, to be printed); an
    existing one keeps its password unless ``reset_password``.
    """
    user, created = User.objects.get_or_create(username=DEMO_USERNAME)
    password = None
    if created or reset_password or not user.has_usable_password():
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.save()
    for name in DEMO_GROUPS:
        group, _ = Group.objects.get_or_create(name=name)
        user.groups.add(group)
    return DemoCredentials(DEMO_USERNAME, password)


__all__ = [
    "DEMO_FLEET",
    "DemoCredentials",
    "demo_fleet_load",
    "demo_ingest",
    "demo_user_ensure",
    "rate_card_seed",
]
