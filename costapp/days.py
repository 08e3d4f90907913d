"""UTC days and the dates pages show: one home for "midnight UTC".

Every stored period starts on a UTC hour or a UTC midnight (bills, rollups,
figures); the display time zone only decides which day a page calls today.
tests/foundation/test_shared_kit.py refuses a second UTC-midnight helper.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, time

from django.conf import settings
from django.utils import timezone


def utc_midnight(day: date) -> datetime:
    """The instant UTC day ``day`` begins."""
    return datetime.combine(day, time(0), tzinfo=UTC)


def day_start(moment: datetime) -> datetime:
    """The UTC midnight at or before ``moment`` (which must carry a zone: a
    naive time has no day)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone; a UTC day needs one")
    return utc_midnight(moment.astimezone(UTC).date())


def hour_start(moment: datetime) -> datetime:
    """The UTC hour at or before ``moment`` (a zone-aware time), where an
    hourly row of that moment begins."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone; a UTC hour needs one")
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def display_today(now: datetime | None = None) -> date:
    """Today in the display time zone (pages end their windows on this day)."""
    tz = zoneinfo.ZoneInfo(settings.DISPLAY_TIME_ZONE)
    return (now or timezone.now()).astimezone(tz).date()


def iso_day(value: date | datetime) -> str:
    """A day as pages and files write it: 2026-11-30."""
    return value.strftime("%Y-%m-%d")


def period_label(start: datetime, grain: str) -> str:
    """A stored period as a page names it, by its grain."""
    if grain == "hour":
        return start.strftime("%Y-%m-%d %H:00 UTC")
    if grain == "week":
        return start.strftime("week of %Y-%m-%d")
    if grain == "month":
        return start.strftime("%Y-%m")
    return iso_day(start)
