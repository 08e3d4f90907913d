"""Stored two-hour rollups: the pages' read of them equals the read of the
hours on the demo fleet (to float rounding), a write to a day's hours drops
that day's mark in the writer's transaction, and an unmarked day is read
from the hours."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from analytics.downsample import Grid, grid_for
from costapp.models import (
    Deployment,
    DeploymentHour,
    HistogramHour,
    TelemetryRollup,
    TelemetryRollupDay,
)
from costapp.telemetry import rollups, selectors, series
from tests.support.demo_data import demo_for_module

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

END = datetime(2026, 11, 30, tzinfo=UTC)
DAYS = 8
START = END - timedelta(days=DAYS)
METRICS = selectors.LATENCY_METRICS


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=END, days=DAYS, recompute=False):
        yield


def grids() -> list[Grid]:
    return [
        Grid(pd.Timestamp(START), pd.Timedelta(hours=2), DAYS * 12),
        Grid(pd.Timestamp(START), pd.Timedelta(hours=6), DAYS * 4),
        series.table_grid(START, END),
    ]


def assert_same(a: series.Series, b: series.Series) -> None:
    assert a.measured == b.measured
    assert list(a.frame.columns) == list(b.frame.columns)
    for column in a.frame.columns:
        np.testing.assert_allclose(
            a.frame[column].to_numpy(float),
            b.frame[column].to_numpy(float),
            rtol=1e-9,
            equal_nan=True,
            err_msg=column,
        )
    assert a.latency.keys() == b.latency.keys()
    for metric in a.latency:
        for column in a.latency[metric].columns:
            np.testing.assert_allclose(
                a.latency[metric][column].to_numpy(float),
                b.latency[metric][column].to_numpy(float),
                rtol=1e-9,
                equal_nan=True,
                err_msg=f"{metric} {column}",
            )


def both(dep: Deployment) -> tuple[series.Raw, series.Raw]:
    stored = rollups.page_read(
        dep, start=START, end=END, grids=grids(), metrics=METRICS
    )
    hours = series.raw_read(dep, start=START, end=END, metrics=METRICS)
    return stored, hours


def test_the_ingest_marks_every_day_it_wrote(demo: None) -> None:
    deployments = Deployment.objects.filter(deploymenthour__isnull=False).distinct()
    assert deployments.exists()
    for dep in deployments:
        days = {
            h.date()
            for h in DeploymentHour.objects.filter(deployment=dep).values_list(
                "hour", flat=True
            )
        }
        marked = set(
            TelemetryRollupDay.objects.filter(deployment=dep).values_list(
                "day", flat=True
            )
        )
        assert days <= marked


def test_the_rollups_give_every_chart_figure_the_hours_give(demo: None) -> None:
    compared = 0
    for dep in Deployment.objects.filter(deploymenthour__isnull=False).distinct():
        stored, hours = both(dep)
        # Rollups, not hours: two-hourly rows, 12 a day at most.
        assert len(stored.prepared) <= DAYS * 12 < len(hours.prepared)
        for grid in grids():
            assert_same(
                series.series_bucket(stored, grid), series.series_bucket(hours, grid)
            )
        window = selectors.window_latency(dep, START, END, stored)
        expected = selectors.window_latency(dep, START, END, hours)
        assert window.keys() == expected.keys()
        for metric, figures in expected.items():
            assert window[metric] == pytest.approx(figures, rel=1e-9), metric
        compared += 1
    assert compared >= 3


def test_a_write_to_an_hour_drops_its_day_and_the_page_reads_it_from_the_hours(
    demo: None,
) -> None:
    dep = Deployment.objects.filter(deploymenthour__isnull=False).first()
    assert dep is not None
    hour = START + timedelta(days=3, hours=5)
    DeploymentHour.objects.filter(deployment=dep, hour=hour).update(
        requests_stop=123456.0, kv_cache_usage_max=0.99
    )
    HistogramHour.objects.filter(
        deployment=dep, hour=hour + timedelta(hours=1)
    ).delete()
    marked = set(
        TelemetryRollupDay.objects.filter(deployment=dep).values_list("day", flat=True)
    )
    assert hour.date() not in marked
    assert (hour - timedelta(days=1)).date() in marked
    stored, hours = both(dep)
    for grid in grids():
        a, b = series.series_bucket(stored, grid), series.series_bucket(hours, grid)
        assert_same(a, b)
    assert series.series_bucket(stored, grids()[0]).frame["requests_stop"].max() >= (
        123456.0
    )
    # Rebuilt, the day is vouched for again and still gives the same figures.
    assert (
        rollups.rollups_rebuild(
            start=hour.date(),
            end=hour.date() + timedelta(days=1),
            deployments=[dep.name],
        )
        == 1
    )
    assert TelemetryRollupDay.objects.filter(deployment=dep, day=hour.date()).exists()
    stored, hours = both(dep)
    assert len(stored.prepared) <= DAYS * 12
    for grid in grids():
        assert_same(
            series.series_bucket(stored, grid), series.series_bucket(hours, grid)
        )


def test_a_grid_off_the_two_hour_boundaries_reads_the_hours(demo: None) -> None:
    dep = Deployment.objects.filter(deploymenthour__isnull=False).first()
    assert dep is not None
    odd = START + timedelta(hours=1)
    grid = grid_for(odd, END)
    assert not rollups.fits(odd, END, [grid])
    assert not rollups.fits(
        START, END, [Grid(pd.Timestamp(START), pd.Timedelta(hours=3), 64)]
    )
    raw = rollups.page_read(dep, start=odd, end=END, grids=[grid], metrics=METRICS)
    assert (
        len(raw.prepared)
        == DeploymentHour.objects.filter(
            deployment=dep, hour__gte=odd, hour__lt=END
        ).count()
    )


def test_truncating_the_hours_drops_every_mark(demo: None) -> None:
    assert TelemetryRollup.objects.exists()
    # Deleting rows of one deployment drops only its own days.
    dep, other = Deployment.objects.filter(deploymenthour__isnull=False).distinct()[:2]
    DeploymentHour.objects.filter(deployment=dep).delete()
    assert not TelemetryRollupDay.objects.filter(deployment=dep).exists()
    assert TelemetryRollupDay.objects.filter(deployment=other).exists()
