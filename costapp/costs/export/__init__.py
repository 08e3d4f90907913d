"""The finance export: the allocated bill per day or month, as CSV or Parquet
with a summary beside it (docs/costs.md, "Finance exports").

Its modules, each importing only those after it (pyproject.toml's costs
layers contract):

- ``files``: the writers (CSV, Parquet, the summary, the ZIP), consuming
  ``Export.rows()`` as they go;
- ``build``: ``ExportSpec`` and ``Export``, the window a month at a time, each
  day's rows built or read whole, and the summary reconciled in the same pass;
- ``day_rows``: the rules of one UTC day (``DayRows``), run by the export and
  by ``costapp.costs.shares`` when it stores a day's rows;
- ``reads``: what the export reads from the database, a day at a time, in one
  read-only snapshot;
- ``rows``: one row and its columns (``ExportRow``, ``SCHEMA_FIELDS``).

Below them: ``costapp.costs.allocations`` and ``costapp.costs.selectors``.
Nothing is re-exported here: import from the module that defines it.
"""
