"""Month-end finance exports on the beat: to a folder or an S3 prefix (moto
on loopback), the same bytes as the page's export, written once the month is
old enough, once under each name, again when the month becomes complete."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.test import Client

from costapp.costs.tasks import month_export_task
from costapp.models import CostLine
from costapp.schedule import beat_schedule
from tests.costs.conftest import utc
from tests.costs.test_exports import needs_postgres, seed_month
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

INCOMPLETE = "costapp-2026-11-01-to-2026-11-30-day-deployment-amortized-incomplete"
COMPLETE = "costapp-2026-11-01-to-2026-11-30-day-deployment-amortized"


def page_csv(client: Client) -> bytes:
    from django.contrib.auth.models import User

    user = User.objects.filter(username="fin").first() or user_in("fin", "finance")
    client.force_login(user)
    response = client.get("/costs/export.csv", {"month": "2026-11"})
    assert response.status_code == 200
    return b"".join(response.streaming_content)  # type: ignore[attr-defined]


def bill_the_last_day() -> None:
    for line in CostLine.objects.filter(period_start=utc(2026, 11, 29)):
        line.pk = None
        line.period_start = utc(2026, 11, 30)
        line.save()


def test_the_month_is_written_to_a_folder_once_due_once_and_again_when_complete(
    settings: object, tmp_path: Path, client: Client
) -> None:
    needs_postgres()
    settings.COSTAPP_MONTHLY_EXPORT_TO = str(tmp_path)  # type: ignore[attr-defined]
    seed_month(days=30, billed_days=29)
    assert "month-export" in beat_schedule()
    # COSTAPP_MONTHLY_EXPORT_AFTER_DAYS (3) after the month ended, not before.
    assert month_export_task("2026-12-03") == []
    written = month_export_task("2026-12-04")
    assert written == [
        f"{INCOMPLETE}.csv",
        f"{INCOMPLETE}-summary.csv",
        f"{INCOMPLETE}.parquet",
    ]
    # The bytes finance downloads from the page, and the summary says why
    # the name says incomplete.
    assert (tmp_path / f"{INCOMPLETE}.csv").read_bytes() == page_csv(client)
    summary = (tmp_path / f"{INCOMPLETE}-summary.csv").read_text()
    assert "2026-11-30" in summary
    assert month_export_task("2026-12-05") == []  # written under that name
    bill_the_last_day()
    assert month_export_task("2026-12-06") == [
        f"{COMPLETE}.csv",
        f"{COMPLETE}-summary.csv",
        f"{COMPLETE}.parquet",
    ]
    assert (tmp_path / f"{COMPLETE}.csv").read_bytes() == page_csv(client)
    assert not list(tmp_path.glob(".*partial*"))


def test_the_month_goes_to_an_s3_prefix_summary_first(
    settings: object, s3: object, client: Client
) -> None:
    needs_postgres()
    settings.COSTAPP_MONTHLY_EXPORT_TO = "s3://exports/finance/monthly/"  # type: ignore[attr-defined]
    seed_month(days=30, billed_days=30)
    assert month_export_task("2026-12-04") == [
        f"{COMPLETE}.csv",
        f"{COMPLETE}-summary.csv",
        f"{COMPLETE}.parquet",
    ]
    keys = {
        o["Key"]
        for o in s3.list_objects_v2(Bucket="exports", Prefix="finance/")["Contents"]  # type: ignore[attr-defined]
    }
    assert keys == {
        f"finance/monthly/{COMPLETE}.csv",
        f"finance/monthly/{COMPLETE}-summary.csv",
        f"finance/monthly/{COMPLETE}.parquet",
    }
    body = s3.get_object(  # type: ignore[attr-defined]
        Bucket="exports", Key=f"finance/monthly/{COMPLETE}.csv"
    )["Body"].read()
    assert body == page_csv(client)
    assert month_export_task("2026-12-05") == []  # already there


@pytest.mark.parametrize(
    ("to", "said"),
    [
        ("relative/folder", "an absolute folder or s3://bucket/prefix"),
        ("/nonexistent/costapp-exports", "not a writable folder"),
        ("s3://", "s3://bucket/prefix"),
    ],
)
def test_a_target_that_cannot_be_used_is_logged_and_writes_nothing(
    settings: object, caplog: pytest.LogCaptureFixture, to: str, said: str
) -> None:
    settings.COSTAPP_MONTHLY_EXPORT_TO = to  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR):
        assert month_export_task("2026-12-10") == []
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert f"COSTAPP_MONTHLY_EXPORT_TO={to!r}: {said}" in record.getMessage()


def test_no_target_no_export(settings: object, tmp_path: Path) -> None:
    settings.COSTAPP_MONTHLY_EXPORT_TO = ""  # type: ignore[attr-defined]
    assert month_export_task("2026-12-10") == []
