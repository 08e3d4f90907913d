"""``capacity_backtest``: today's prediction against the deployment's telemetry."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from analytics.capacity.backtest import predicted_itl_s
from analytics.capacity.engine import step_model
from costapp.capacity import selectors
from costapp.models import Deployment, DeploymentHour, HistogramHour

BOUNDS = [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, None]


def _declare_true_curve(deployment: Deployment, factor: float) -> None:
    """Give every seeded hour a running batch and an ITL histogram whose mean is
    ``factor`` x the roofline at that batch (a declared curve, not the engine's)."""
    scenario = selectors.deployment_today(deployment).scenario
    assert scenario is not None
    model = step_model(scenario)
    rows = list(
        DeploymentHour.objects.filter(deployment=deployment, requests_stop__gt=0)
    )
    for i, row in enumerate(rows):
        batch = 4.0 + 4.0 * (i % 24)
        itl = factor * predicted_itl_s(model, scenario, batch)
        row.running_mean = batch * row.replicas_mean
        row.generation_tokens = batch / itl * 3600 * row.replicas_mean
        # Keep the seeded request shape (800 in, 200 out) for the new token count.
        requests = row.generation_tokens / 200
        row.requests_stop, row.requests_length = requests * 0.9, requests * 0.1
        row.prompt_tokens = requests * 800
        row.save()
        tokens = row.generation_tokens
        # Every token in the bucket that holds 1.2 x the mean.
        upper = next(b for b in BOUNDS if b is None or b >= itl * 1.2)
        cumulative = [0.0 if b is not None and b < upper else tokens for b in BOUNDS]
        HistogramHour.objects.create(
            deployment=deployment,
            hour=row.hour,
            metric="itl",
            bounds=BOUNDS,
            cumulative_counts=cumulative,
            total_sum=itl * tokens,
            total_count=tokens,
        )


def test_the_backtest_reports_a_declared_30_percent_error_and_offers_the_fit(
    chat: Deployment,
) -> None:
    _declare_true_curve(chat, 1.3)
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
    _declare_true_curve(chat, 1.0)
    out = StringIO()
    call_command("capacity_backtest", "--deployment", "chat", "--circular", stdout=out)
    assert "circular" in out.getvalue()
    with pytest.raises(CommandError, match="'nope'"):
        call_command("capacity_backtest", "--deployment", "nope")
    with pytest.raises(CommandError, match="--days 0"):
        call_command("capacity_backtest", "--deployment", "chat", "--days", "0")


def test_hours_outside_the_window_are_left_out(chat: Deployment) -> None:
    _declare_true_curve(chat, 1.3)
    out = StringIO()
    call_command(
        "capacity_backtest", "--deployment", "chat", "--days", "1", "--json", stdout=out
    )
    hours = json.loads(out.getvalue())["hours"]
    # One day of the 48 seeded hours (plus the empty hour before them, left out).
    assert 23 <= len(hours) <= 25
