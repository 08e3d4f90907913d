"""Database functions the reads share."""

from __future__ import annotations

from typing import Any

from django.db.models import FloatField, Func


class Epoch(Func):
    """Seconds since 1970 of a timestamp, in PostgreSQL and SQLite."""

    output_field = FloatField()
    template = "EXTRACT(EPOCH FROM %(expressions)s)"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # '%%%%s' is strftime's '%s' once Python and the driver unescape it.
        return self.as_sql(
            compiler,
            connection,
            template="CAST(strftime('%%%%s', %(expressions)s) AS REAL)",
            **extra,
        )
