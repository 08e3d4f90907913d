"""Write a finance export and its summary (two files), for scheduled jobs.

    manage.py costs_export --start 2026-11-01 --end 2026-12-01 --grain day \\
        --format parquet --out /exports/nov.parquet

writes ``/exports/nov.parquet`` and ``/exports/nov-summary.csv``. ``--end`` is
exclusive (UTC days, as Cost Explorer's); ``--month 2026-11`` means the whole
month. Without ``--out`` the file is named after the window, grain, basis and
``-incomplete`` when days have no bill.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.errors import shown
from costapp.costs.export.build import Export, ExportSpec
from costapp.costs.export.reads import one_snapshot
from costapp.costs.export.write import export_files_write
from costapp.costs.forms import ExportForm


class Command(BaseCommand):
    help = "Write the allocated bill by day or month as CSV or Parquet, plus a summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--start", help="first UTC day (YYYY-MM-DD)")
        parser.add_argument("--end", help="UTC day after the last (exclusive)")
        parser.add_argument("--month", help="YYYY-MM: the whole month instead")
        parser.add_argument("--grain", choices=["day", "month"], default="day")
        parser.add_argument(
            "--by", choices=["deployment", "team"], default="deployment"
        )
        parser.add_argument(
            "--basis",
            choices=["amortized", "unblended", "net_amortized"],
            default="amortized",
        )
        parser.add_argument("--format", choices=["csv", "parquet"], default="csv")
        parser.add_argument("--out", help="file to write; the summary goes beside it")

    def handle(self, *args: Any, **opts: Any) -> None:
        data = {
            k: opts[k]
            for k in ("start", "end", "month", "grain", "by", "basis", "format")
        }
        form = ExportForm({k: v for k, v in data.items() if v})
        if not form.is_valid():
            raise CommandError("; ".join(form.messages()))
        if opts["out"]:
            folder = Path(opts["out"]).parent
            if not folder.is_dir():
                raise CommandError(
                    f"out={shown(opts['out'])}: the folder {folder} does not exist"
                )
            if not os.access(folder, os.W_OK):
                raise CommandError(
                    f"out={shown(opts['out'])}: the folder {folder} is not writable"
                )
        with one_snapshot():
            self._write(form.cleaned_data, opts["out"])

    def _write(self, w: dict[str, Any], out_name: str | None) -> None:
        export = Export(
            ExportSpec(
                start=w["start"],
                end=w["end"],
                grain=w["grain"],
                by=w["by"],
                basis=w["basis"],
                format=w["format"],
            )
        )
        out, summary = export_files_write(
            export, Path(out_name or f"{export.stem}.{w['format']}")
        )
        complete = (
            "" if export.coverage.complete else " (incomplete: days without a bill)"
        )
        self.stdout.write(f"wrote {out} and {summary}{complete}")
