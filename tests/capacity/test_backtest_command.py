"""``capacity_backtest``: today's prediction against the deployment's telemetry."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from costapp.models import Deployment
from tests.capacity.seed_demo import declare_itl_curve


def test_the_backtest_reports_a_declared_30_percent_error_and_offers_the_fit(
    chat: Deployment,
) -> None:
    declare_itl_curve(chat, 1.3)
    out = StringIO()
    call_command("capacity_backtest", "--deployment", "chat", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["itl_error"] == pytest.approx(1 / 1.3 - 1, abs=0.05)
    assert doc["large_error"] and doc["offer_telemetry_fit"]
    assert len([h for h in doc["hours"] if h["itl_error"] is not None]) == 48


def test_the_backtest_says_there_is_nothing_to_compare_without_itl_telemetry(
    chat: Deployment,
) -> None:
    out = StringIO()
    call_command("capacity_backtest", "--deployment", "chat", stdout=out)
    assert "nothing to compare" in out.getvalue()


def test_circular_telemetry_is_marked_and_a_bad_deployment_is_named(
    chat: Deployment,
) -> None:
    declare_itl_curve(chat, 1.0)
    out = StringIO()
    call_command("capacity_backtest", "--deployment", "chat", "--circular", stdout=out)
    assert "circular" in out.getvalue()
    with pytest.raises(CommandError, match="'nope'"):
        call_command("capacity_backtest", "--deployment", "nope")
    with pytest.raises(CommandError, match="--days 0"):
        call_command("capacity_backtest", "--deployment", "chat", "--days", "0")


def test_hours_outside_the_window_are_left_out(chat: Deployment) -> None:
    declare_itl_curve(chat, 1.3)
    out = StringIO()
    call_command(
        "capacity_backtest", "--deployment", "chat", "--days", "1", "--json", stdout=out
    )
    hours = json.loads(out.getvalue())["hours"]
    # One day of the 48 seeded hours (plus the empty hour before them, left out).
    assert 23 <= len(hours) <= 25
