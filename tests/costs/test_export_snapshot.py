"""``costs_export`` reads in one snapshot, so its summary reconciles with the
file beside it even when a bill or an ingest commits halfway through."""

from __future__ import annotations

import csv
import io
import zipfile
from collections.abc import Iterator
from decimal import Decimal as D

import pytest
from django.db import connection
from django.test import Client

from costapp.costs.export.reads import in_one_snapshot, one_snapshot
from costapp.models import TeamHoliday
from tests.costs.conftest import ACCOUNT
from tests.costs.test_exports import seed_month
from tests.support.services import other_session
from tests.support.users import user_in

pytestmark = pytest.mark.usefixtures("postgres_only")


HOLIDAY = (
    "INSERT INTO costapp_teamholiday (team, country, subdiv, day, name) "
    "VALUES ('search', '', '', '2026-11-30', 'committed mid-export')"
)

# The missing third day's bill, as Cost Explorer would send it a day late.
LATE_BILL = (
    "INSERT INTO costapp_costline (source, account_id, period_start, granularity, "
    "service, usage_type, record_type, resource_id, tag_key, tag_value, region, "
    "usage_quantity, usage_unit, amortized_cost, unblended_cost, currency, "
    f"estimated, fetched_at) VALUES ('cost_explorer', '{ACCOUNT}', "
    "'2026-11-03T00:00:00Z', 'day', 'EC2', 'BoxUsage:p5.48xlarge', 'usage', '', "
    "'', '', '', 24, 'Hrs', 1322.96, 1322.96, 'USD', false, now())"
)


@pytest.mark.django_db(transaction=True)
def test_a_commit_during_the_export_is_not_seen_by_it() -> None:
    with one_snapshot():
        before = TeamHoliday.objects.count()
        with other_session() as other:
            other.execute(HOLIDAY)
        assert TeamHoliday.objects.count() == before
        with connection.cursor() as cursor:
            cursor.execute("SHOW transaction_read_only")
            assert cursor.fetchone() == ("on",)
    assert TeamHoliday.objects.count() == before + 1


@pytest.mark.django_db
def test_inside_a_callers_transaction_it_reads_in_that_one() -> None:
    TeamHoliday.objects.create(team="search", name="mine")
    with one_snapshot():  # no SET TRANSACTION after the caller's first query
        assert TeamHoliday.objects.filter(name="mine").exists()


@pytest.mark.django_db(transaction=True)
def test_a_stream_reads_every_item_in_the_snapshot_of_its_first() -> None:
    def counts() -> Iterator[int]:
        yield TeamHoliday.objects.count()
        yield TeamHoliday.objects.count()

    stream = in_one_snapshot(counts)
    first = next(stream)
    with other_session() as other:
        other.execute(HOLIDAY)
    assert next(stream) == first
    stream.close()  # as Django closes a response: the snapshot ends
    assert not connection.in_atomic_block
    assert TeamHoliday.objects.count() == first + 1


@pytest.mark.django_db(transaction=True)
def test_a_bill_committed_after_the_web_zip_began_is_wholly_in_it(
    client: Client,
) -> None:
    """The summary and the rows of a streamed ZIP read the same bills, even
    when the missing day's bill lands after the view has answered: before,
    the coverage was read in the view and the rows while streaming, so the
    summary called the day missing while the data billed it in full."""
    seed_month(days=3, billed_days=2)
    client.force_login(user_in("fin", "finance"))
    query = {"start": "2026-11-01", "end": "2026-11-04", "format": "csv"}
    response = client.get("/costs/export.zip", query)
    assert response.status_code == 200
    stem = "costapp-2026-11-01-to-2026-11-03-day-deployment-amortized"
    # The name was read before the bill; the files inside are named after
    # what they hold.
    assert response["Content-Disposition"] == (
        f'attachment; filename="{stem}-incomplete-csv.zip"'
    )
    with other_session() as other:
        other.execute(LATE_BILL)
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    response.close()
    assert archive.namelist() == [f"{stem}.csv", f"{stem}-summary.csv"]
    rows = list(csv.DictReader(io.StringIO(archive.read(f"{stem}.csv").decode())))
    (summary,) = csv.DictReader(
        io.StringIO(archive.read(f"{stem}-summary.csv").decode())
    )
    assert (summary["days_missing"], summary["missing_days"]) == ("0", "")
    late = [r for r in rows if r["period_start"] == "2026-11-03"]
    assert late and {r["status"] for r in late} == {"final"}
    exported = sum((D(r["bill_amount"]) for r in rows if r["bill_amount"]), D(0))
    assert (
        exported == D(summary["bill_total_stored"]) == D(summary["bill_total_exported"])
    )
    assert D(summary["difference"]) == 0
