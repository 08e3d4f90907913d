"""COPY writes (costapp/pgcopy.py) leave the rows the ORM would: the ingest's
upsert through COPY against ``bulk_create(update_conflicts=True)`` on the same
rows, with a kept field, a key twice in one call, and text and JSON that need
COPY's escapes. PostgreSQL only: elsewhere the ORM path is the only path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from costapp import ingest
from costapp.models import Deployment, DeploymentHour, HistogramHour
from costapp.pgcopy import copy_upsert

pytestmark = [pytest.mark.django_db]

T0 = datetime(2026, 11, 1, tzinfo=UTC)
AWKWARD = ["tab\there", "line\nbreak", "back\\slash", 'quote"d', "ünï", "\\N"]


@pytest.fixture(autouse=True)
def _postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("COPY is PostgreSQL's; the ORM path is the only one elsewhere")


def _hours(deployment: Deployment, start: int, stop: int, scale: float) -> list[Any]:
    return [
        DeploymentHour(
            deployment=deployment,
            hour=T0 + timedelta(hours=h),
            requests_stop=scale * h,
            prompt_tokens=scale * h * 1000 + 0.1,
            gpu_seconds=None if (h + int(scale)) % 3 == 0 else scale * 3600.0 / 7,
            kv_cache_usage_max=None if h % 2 else 0.25,
        )
        for h in range(start, stop)
    ]


def _stored(deployment: Deployment) -> list[tuple[Any, ...]]:
    fields = [
        f.attname
        for f in DeploymentHour._meta.concrete_fields
        if f.attname not in {"id", "deployment_id"}
    ]
    return list(
        DeploymentHour.objects.filter(deployment=deployment)
        .order_by("hour")
        .values_list(*fields)
    )


def _write(
    deployment: Deployment, rows: list[Any], monkeypatch: Any, copy: bool
) -> None:
    monkeypatch.setattr(ingest, "COPY_MIN_ROWS", 0 if copy else 10**9)
    # As records_write does: unmeasured GPU-seconds never overwrite a figure.
    for keep in ((), ("gpu_seconds",)):
        ingest._upsert(
            DeploymentHour,
            [r for r in rows if (r.gpu_seconds is None) == bool(keep)],
            DeploymentHour.NATURAL_KEY,
            keep=keep,
        )


def test_the_copy_upsert_leaves_the_rows_the_orm_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    by_copy = Deployment.objects.create(name="copy", model_name="m", gpu_type="L4")
    by_orm = Deployment.objects.create(name="orm", model_name="m", gpu_type="L4")
    for start, stop, scale in ((0, 30, 1.0), (10, 40, 2.5), (35, 36, 0.5)):
        for deployment, copy in ((by_copy, True), (by_orm, False)):
            _write(
                deployment, _hours(deployment, start, stop, scale), monkeypatch, copy
            )
    assert _stored(by_copy) == _stored(by_orm)
    assert len(_stored(by_copy)) == 40
    # A kept field: hour 13, measured first, then read again unmeasured.
    hour = DeploymentHour.objects.get(deployment=by_copy, hour=T0 + timedelta(hours=13))
    assert hour.gpu_seconds == 3600.0 / 7 and hour.requests_stop == 2.5 * 13


def test_a_key_twice_in_one_call_keeps_the_later_row() -> None:
    deployment = Deployment.objects.create(name="twice", model_name="m", gpu_type="L4")
    first, later = _hours(deployment, 5, 6, 1.0) + _hours(deployment, 5, 6, 4.0)
    unique = DeploymentHour.NATURAL_KEY
    update = ["requests_stop", "prompt_tokens"]
    assert copy_upsert(DeploymentHour, [first, later], unique, update) == 2
    (stored,) = DeploymentHour.objects.filter(deployment=deployment)
    assert stored.requests_stop == 20.0


def test_json_and_text_needing_copys_escapes_arrive_as_they_were() -> None:
    deployment = Deployment.objects.create(name="json", model_name="m", gpu_type="L4")
    rows = [
        HistogramHour(
            deployment=deployment,
            hour=T0,
            metric=text,
            bounds=[0.1, 1.0, "+Inf", text],
            cumulative_counts=[1, 2, {"k": text}],
            total_sum=1.5,
            total_count=2,
        )
        for text in AWKWARD
    ]
    copy_upsert(HistogramHour, rows, HistogramHour.NATURAL_KEY, ["bounds"])
    stored = {h.metric: h for h in HistogramHour.objects.filter(deployment=deployment)}
    assert sorted(stored) == sorted(AWKWARD)
    for text in AWKWARD:
        assert stored[text].bounds == [0.1, 1.0, "+Inf", text]
        assert stored[text].cumulative_counts == [1, 2, {"k": text}]
