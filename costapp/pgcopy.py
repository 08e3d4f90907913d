"""PostgreSQL's COPY, for the writes of many rows: values in COPY's text
format, and model instances inserted in one stream. ``bulk_create`` sends
every value as a bound parameter (forty columns of ten thousand figures are
four hundred thousand of them); COPY streams text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
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


def _lines(
    fields: Sequence[models.Field], rows: Sequence[models.Model]
) -> Iterator[str]:
    """``rows``' ``fields`` as COPY text, 2,000 lines a piece."""
    pairs = list(zip([f.attname for f in fields], _converters(fields), strict=True))
    for start in range(0, len(rows), 2000):
        yield "".join(
            "\t".join(text(getattr(r, a)) for a, text in pairs) + "\n"
            for r in rows[start : start + 2000]
        )


def copy_insert(model: type[models.Model], rows: Sequence[models.Model]) -> int:
    """Insert ``rows`` (new instances, their primary keys left to the
    database) with one COPY; returns how many. PostgreSQL only."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    # Identifiers come from the model's fields, never from input.
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for piece in _lines(fields, rows):
                copy.write(piece)
    return len(rows)


def staged_upsert(
    table: str,
    columns: Sequence[str],
    keys: Sequence[str],
    updates: Sequence[str],
    pieces: Iterable[str],
) -> None:
    """COPY ``pieces`` (COPY text of ``columns``, whole lines) into a
    temporary table shaped like ``table``, then one INSERT ... ON CONFLICT
    (``keys``) DO UPDATE of ``updates`` (DO NOTHING without any) from it.
    PostgreSQL only; the names are the models', never input."""
    q = connection.ops.quote_name
    into = q(table)
    names = ", ".join(q(c) for c in columns)
    sets = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in updates)
    action = f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
    key_names = ", ".join(q(c) for c in keys)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE staged_upsert_load ON COMMIT DROP AS "  # noqa: S608
            f"SELECT {names} FROM {into} WITH NO DATA"
        )
        with cursor.cursor.copy(
            f"COPY staged_upsert_load ({names}) FROM STDIN"
        ) as copy:
            for piece in pieces:
                copy.write(piece)
        cursor.execute(
            f"INSERT INTO {into} ({names}) SELECT {names} "  # noqa: S608
            f"FROM staged_upsert_load ON CONFLICT ({key_names}) {action}"
        )
        cursor.execute("DROP TABLE staged_upsert_load")


def copy_upsert(
    model: type[models.Model],
    rows: Sequence[models.Model],
    unique_fields: Sequence[str],
    update_fields: Sequence[str],
) -> int:
    """Insert ``rows`` or update ``update_fields`` of the rows with the same
    ``unique_fields``, as ``bulk_create(update_conflicts=True)`` does, through
    ``staged_upsert``; returns how many. Where two rows share a key the later
    one is written (as in the ORM's batches). PostgreSQL only."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    by_name = {f.name: f for f in fields}
    key_attnames = [by_name[n].attname for n in unique_fields]
    latest = {tuple(getattr(r, a) for a in key_attnames): r for r in rows}
    staged_upsert(
        model._meta.db_table,
        [str(f.column) for f in fields],
        [str(by_name[n].column) for n in unique_fields],
        [str(by_name[n].column) for n in update_fields],
        _lines(fields, list(latest.values())),
    )
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
