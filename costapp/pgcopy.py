"""PostgreSQL's COPY, for the writes of many rows: values in COPY's text
format, and model instances inserted in one stream. ``bulk_create`` sends
every value as a bound parameter (forty columns of ten thousand figures are
four hundred thousand of them); COPY streams text."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, models, transaction

# Below this many rows one INSERT with parameters is as quick as a COPY (a
# COPY is a round trip of its own, a staging table two more): the pipeline's
# per-deployment rollups of a refresh, 1,000 small writes, were 47% slower
# through COPY (bench/bench_pipeline.py, 2026-12-07).
COPY_MIN_ROWS = 500


def copy_text(value: Any) -> str:
    """One value in PostgreSQL's COPY text format."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict | list):
        value = json.dumps(value)
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = (
            text.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return text


def _converters(fields: Sequence[models.Field]) -> list[Callable[[Any], str]]:
    """A COPY-text writer per field: JSON fields as JSON (a str value too,
    which ``copy_text`` would write bare), the rest by ``copy_text``."""

    def json_text(encoder: Any) -> Callable[[Any], str]:
        return lambda v: "\\N" if v is None else copy_text(json.dumps(v, cls=encoder))

    return [
        json_text(f.encoder) if isinstance(f, models.JSONField) else copy_text
        for f in fields
    ]


def _copy_rows(
    cursor: Any,
    table: str,
    fields: Sequence[models.Field],
    rows: Sequence[models.Model],
) -> None:
    """Stream ``rows``' ``fields`` into ``table`` (quoted) with one COPY."""
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    pairs = list(zip([f.attname for f in fields], _converters(fields), strict=True))
    # Identifiers come from the model's fields, never from input.
    with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
        for start in range(0, len(rows), 2000):
            copy.write(
                "".join(
                    "\t".join(text(getattr(r, a)) for a, text in pairs) + "\n"
                    for r in rows[start : start + 2000]
                )
            )


def copy_insert(model: type[models.Model], rows: Sequence[models.Model]) -> int:
    """Insert ``rows`` (new instances, their primary keys left to the
    database) with one COPY; returns how many. PostgreSQL only."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    with connection.cursor() as cursor:
        _copy_rows(
            cursor, connection.ops.quote_name(model._meta.db_table), fields, rows
        )
    return len(rows)


def copy_upsert(
    model: type[models.Model],
    rows: Sequence[models.Model],
    unique_fields: Sequence[str],
    update_fields: Sequence[str],
) -> int:
    """Insert ``rows`` or update ``update_fields`` of the rows with the same
    ``unique_fields``, as ``bulk_create(update_conflicts=True)`` does, through
    a COPY into a temporary table and one INSERT ... ON CONFLICT from it;
    returns how many. Where two rows share a key the later one is written
    (as in the ORM's batches). PostgreSQL only."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    by_name = {f.name: f for f in fields}
    key_attnames = [by_name[n].attname for n in unique_fields]
    latest = {tuple(getattr(r, a) for a in key_attnames): r for r in rows}
    q = connection.ops.quote_name
    table = q(model._meta.db_table)
    columns = ", ".join(q(str(f.column)) for f in fields)
    keys = ", ".join(q(str(by_name[n].column)) for n in unique_fields)
    updates = ", ".join(
        f"{q(c)} = EXCLUDED.{q(c)}"
        for c in (str(by_name[n].column) for n in update_fields)
    )
    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    # Identifiers come from the model's fields, never from input.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE copy_upsert_load ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        _copy_rows(cursor, "copy_upsert_load", fields, list(latest.values()))
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} "  # noqa: S608
            f"FROM copy_upsert_load ON CONFLICT ({keys}) {action}"
        )
        cursor.execute("DROP TABLE copy_upsert_load")
    return len(rows)


def rows_insert(
    model: type[models.Model], rows: Sequence[models.Model], *, batch_size: int = 2000
) -> int:
    """Insert new ``rows``: one COPY on PostgreSQL from ``COPY_MIN_ROWS`` rows
    (their primary keys stay unset), ``bulk_create`` otherwise and on the
    embedded SQLite; returns how many."""
    if connection.vendor == "postgresql" and len(rows) >= COPY_MIN_ROWS:
        return copy_insert(model, rows)
    model._default_manager.bulk_create(rows, batch_size=batch_size)
    return len(rows)
