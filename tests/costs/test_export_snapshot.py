"""``costs_export`` reads in one snapshot, so its summary reconciles with the
file beside it even when a bill or an ingest commits halfway through."""

from __future__ import annotations

import pytest
from django.db import connection

from costapp.management.commands.costs_export import one_snapshot
from costapp.models import TeamHoliday
from tests.support.services import other_session

pytestmark = pytest.mark.usefixtures("postgres_only")


HOLIDAY = (
    "INSERT INTO costapp_teamholiday (team, country, subdiv, day, name) "
    "VALUES ('search', '', '', '2026-11-30', 'committed mid-export')"
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
