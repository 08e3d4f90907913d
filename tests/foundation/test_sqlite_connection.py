"""How costapp opens a SQLite file (the embedded demo): WAL, so that a reader
never blocks the writer; writes begin IMMEDIATE; the export's snapshot
begins DEFERRED and read-only (tests/costs/test_export_sqlite_locking.py
shows a login beside a slow export)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.db.backends.sqlite3.base import DatabaseWrapper
from django.test.utils import CaptureQueriesContext

from costapp.costs.export.reads import one_snapshot
from costapp.env import database_from_url
from costapp.models import TeamHoliday

pytestmark = pytest.mark.smoke


@pytest.fixture
def unblocked(django_db_blocker: Any) -> Iterator[None]:
    """Connections of the test's own to a file of its own, not the suite's
    test database."""
    with django_db_blocker.unblock():
        yield


def opened(path: Path, alias: str) -> DatabaseWrapper:
    settings = database_from_url(f"sqlite:///{path}", base_dir=path.parent)
    wrapper = DatabaseWrapper(
        {**settings, "TIME_ZONE": None, "CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False,
         "AUTOCOMMIT": True, "ATOMIC_REQUESTS": False, "USER": "", "PASSWORD": "",
         "HOST": "", "PORT": "", "TEST": {}},
        alias=alias,
    )  # fmt: skip
    wrapper.ensure_connection()
    return wrapper


def test_a_sqlite_file_opens_in_wal_with_a_busy_timeout(
    tmp_path: Path, unblocked: None
) -> None:
    wrapper = opened(tmp_path / "c.sqlite3", "wal_probe")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone() == ("wal",)
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone() == (1,)  # NORMAL
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone() == (30000,)
        assert wrapper.transaction_mode == "IMMEDIATE"
    finally:
        wrapper.close()


def test_a_reader_in_wal_lets_a_writer_commit_and_keeps_its_snapshot(
    tmp_path: Path, unblocked: None
) -> None:
    path = tmp_path / "c.sqlite3"
    reader, writer = opened(path, "reader"), opened(path, "writer")
    try:
        with writer.cursor() as cursor:
            cursor.execute("CREATE TABLE t (x integer)")
        with reader.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
            cursor.execute("SELECT count(*) FROM t")
            with writer.cursor() as other:  # would wait 30 s and fail before WAL
                other.execute("BEGIN IMMEDIATE")
                other.execute("INSERT INTO t VALUES (1)")
                other.execute("COMMIT")
            cursor.execute("SELECT count(*) FROM t")
            assert cursor.fetchone() == (0,)
            cursor.execute("COMMIT")
            cursor.execute("SELECT count(*) FROM t")
            assert cursor.fetchone() == (1,)
    finally:
        reader.close()
        writer.close()


# The PostgreSQL snapshot: tests/costs/test_export_snapshot.py.
@pytest.mark.sqlite_only
@pytest.mark.django_db(transaction=True)
def test_the_export_snapshot_begins_deferred_and_refuses_writes() -> None:
    with CaptureQueriesContext(connection) as queries:
        with one_snapshot():
            TeamHoliday.objects.count()
            with pytest.raises(OperationalError, match="readonly"):
                TeamHoliday.objects.create(team="search", name="inside")
        # Afterwards writes work again, and begin IMMEDIATE as before.
        with transaction.atomic():
            TeamHoliday.objects.create(team="search", name="after")
    begins = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith("BEGIN")
    ]
    assert begins == ["BEGIN DEFERRED", "BEGIN IMMEDIATE"]
    assert list(TeamHoliday.objects.values_list("name", flat=True)) == ["after"]
