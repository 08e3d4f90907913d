"""The database's own record of committed writes, for the page cache.

A statement-level trigger on every costapp table (``costapp.pagecache``
installs it after each ``migrate``) records each writing transaction here,
whatever its path: the ingest, a recompute, the admin, a shell or raw SQL.
The pages read one version from these two tables and cache their rendered
bodies under it, so a write shows on the next request. PostgreSQL only; on
SQLite (the embedded demo) the pages are not cached.
"""

from __future__ import annotations

from django.db import models


class DataChange(models.Model):
    """One writing transaction not yet folded into ``DataChangeTotal``.

    ``last_statement`` is a fresh value of the ``costapp_datachange_statement``
    sequence at each of the transaction's writing statements. A sequence is
    never rolled back, so no version comes back after a rollback, a savepoint's
    included; one row per transaction (its own ``txid``) means writers never
    wait on each other and the table stays small between compactions.
    """

    txid = models.BigIntegerField(unique=True)
    last_statement = models.BigIntegerField()

    def __str__(self) -> str:
        return f"transaction {self.txid}, statement {self.last_statement}"


class DataChangeTotal(models.Model):
    """The row compaction folds old ``DataChange`` rows into, in the same
    statement that deletes them, so the version a reader sees stays put."""

    transactions = models.BigIntegerField(default=0)
    last_statement = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.transactions} transactions folded, up to {self.last_statement}"
