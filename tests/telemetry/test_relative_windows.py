"""The telemetry page's relative windows: the last 6, 24 or 48 hours (its
rows are hours) and the day presets, each ending at the last complete hour
or day; the one in progress only on request, labelled partial; kept in the
URL; an unknown value named with its field."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.http import QueryDict
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from costapp.filters import HOUR_PRESETS, hour_window
from costapp.models import Deployment, DeploymentHour
from costapp.telemetry.forms import WindowForm
from tests.support.users import user_in

NOW = datetime(2026, 12, 7, 14, 23, tzinfo=UTC)
HOUR = timedelta(hours=1)
DEFAULT = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC))


def window(query: str) -> object:
    return WindowForm(QueryDict(query)).window(DEFAULT, now=NOW)


@given(
    preset=st.sampled_from(sorted(HOUR_PRESETS)),
    now=st.datetimes(
        min_value=datetime(2015, 1, 1),
        max_value=datetime(2100, 1, 1),
        timezones=st.just(UTC),
    ),
    through_now=st.booleans(),
)
def test_an_hour_preset_is_whole_hours_ending_at_the_last_complete_one(
    preset: str, now: datetime, through_now: bool
) -> None:
    start, end = hour_window(preset, now, through_now=through_now)
    assert end - start == int(preset.removesuffix("h")) * HOUR
    assert (start.minute, start.second, start.microsecond) == (0, 0, 0)
    if through_now:  # the hour in progress is the last one
        assert end - HOUR <= now < end
    else:
        assert end <= now < end + HOUR


def test_the_last_24_hours_end_at_the_last_complete_hour() -> None:
    w = window("preset=24h")
    assert (w.start, w.end) == (  # type: ignore[attr-defined]
        datetime(2026, 12, 6, 14, tzinfo=UTC),
        datetime(2026, 12, 7, 14, tzinfo=UTC),
    )
    assert w.label == "last 24 hours"  # type: ignore[attr-defined]
    assert not w.in_progress and w.hourly  # type: ignore[attr-defined]


def test_the_hour_in_progress_only_on_request_and_labelled_partial() -> None:
    w = window("preset=6h&partial=1")
    assert (w.start, w.end) == (  # type: ignore[attr-defined]
        datetime(2026, 12, 7, 9, tzinfo=UTC),
        datetime(2026, 12, 7, 15, tzinfo=UTC),
    )
    assert w.in_progress  # type: ignore[attr-defined]
    assert w.label == (  # type: ignore[attr-defined]
        "last 6 hours; the hour from 2026-12-07 14:00 UTC is in progress: "
        "partial, not closed"
    )


def test_day_presets_end_at_the_last_complete_utc_day_or_run_through_today() -> None:
    w = window("preset=7d")
    assert (w.start, w.end) == (  # type: ignore[attr-defined]
        datetime(2026, 11, 30, tzinfo=UTC),
        datetime(2026, 12, 7, tzinfo=UTC),
    )
    assert not w.hourly and not w.in_progress  # type: ignore[attr-defined]
    today = window("preset=7d&partial=on")
    assert today.end == datetime(2026, 12, 8, tzinfo=UTC)  # type: ignore[attr-defined]
    assert "2026-12-07 is today: partial, not closed" in today.label  # type: ignore[attr-defined]


def test_a_preset_wins_over_the_days_the_form_also_sends() -> None:
    w = window("preset=48h&start=2026-01-01&end=2026-01-05")
    assert w.end - w.start == 48 * HOUR  # type: ignore[attr-defined]
    custom = window("preset=custom&start=2026-01-01&end=2026-01-05")
    assert custom.preset == "custom"  # type: ignore[attr-defined]
    assert custom.end == datetime(2026, 1, 5, tzinfo=UTC)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("query", "note"),
    [
        (
            "preset=12h",
            "preset='12h': not a preset (one of 6h, 24h, 48h, 7d, 30d, custom)",
        ),
        ("preset=24h&partial=maybe", "partial='maybe': a checkbox is on or off"),
    ],
)
def test_an_unknown_value_is_named_with_its_field(query: str, note: str) -> None:
    w = window(query)
    assert note in w.notes  # type: ignore[attr-defined]
    if "preset=12h" in query:  # the default window instead
        assert (w.start, w.end) == DEFAULT  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_the_page_shows_the_last_24_hours_hour_by_hour_and_keeps_it_in_links() -> None:
    dep = Deployment.objects.create(
        name="chat", engine="vllm", model_name="m", gpu_type="H100-80GB"
    )
    first = datetime(2026, 12, 4, tzinfo=UTC)
    DeploymentHour.objects.bulk_create(
        DeploymentHour(deployment=dep, hour=first + h * HOUR, gpu_seconds=3600.0)
        for h in range(int((NOW - first) / HOUR) + 1)  # the hour in progress too
    )
    client = Client()
    with time_machine.travel(NOW, tick=False):
        client.force_login(user_in("lead", "tech lead"))  # a session of that time
        page = html.unescape(client.get("/telemetry/chat/?preset=24h").content.decode())
        now_page = html.unescape(
            client.get("/telemetry/chat/?preset=24h&partial=1").content.decode()
        )
        bad = client.get("/telemetry/chat/?preset=1y")
    assert (
        "Showing UTC hours <strong>2026-12-06 14:00</strong> to "
        "<strong>2026-12-07 14:00</strong> (exclusive) (last 24 hours);" in page
    )
    assert 'id="window-partial"' not in page
    hours = page[page.index('id="hours"') : page.index('id="devices"')]
    assert hours.count("<tr>") == 1 + 24  # one row per complete hour
    assert '<a href="?preset=24h" data-preset="24h" class="current">' in page
    assert '<a href="?preset=6h" data-preset="6h">last 6 hours</a>' in page
    # Through the hour in progress: the same 24 rows, the last one partial,
    # and every preset link keeps the choice.
    assert 'id="window-partial">partial</span>' in now_page
    assert "the hour from 2026-12-07 14:00 UTC is in progress" in now_page
    assert '<a href="?preset=6h&partial=1" data-preset="6h">' in now_page
    now_hours = now_page[now_page.index('id="hours"') : now_page.index('id="devices"')]
    assert now_hours.count("<tr>") == 1 + 24
    assert bad.status_code == 200
    assert (
        "preset=&#x27;1y&#x27;: not a preset (one of 6h, 24h, 48h, 7d, 30d, custom)"
        in bad.content.decode()
    )
