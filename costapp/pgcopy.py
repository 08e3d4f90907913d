"""PostgreSQL's COPY, for the writes of many rows: values in COPY's text
format, and model instances inserted in one stream. ``bulk_create`` sends
every value as a bound parameter (forty columns of ten thousand figures are
four hundred thousand of them); COPY streams text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, models


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


def copy_insert(model: type[models.Model], rows: Sequence[models.Model]) -> int:
    """Insert ``rows`` (new instances, their primary keys left to the
    database) with one COPY; returns how many. PostgreSQL only."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    attnames = [f.attname for f in fields]
    with connection.cursor() as cursor:
        # Identifiers come from the model's fields, never from input.
        with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for start in range(0, len(rows), 2000):
                copy.write(
                    "".join(
                        "\t".join(copy_text(getattr(r, a)) for a in attnames) + "\n"
                        for r in rows[start : start + 2000]
                    )
                )
    return len(rows)
