"""Write a finance export and its summary (two files), for scheduled jobs.

    manage.py costs_export --start 2026-11-01 --end 2026-12-01 --grain day \\
        --format parquet --out /exports/nov.parquet

writes ``/exports/nov.parquet`` and ``/exports/nov-summary.csv``. ``--end`` is
exclusive (UTC days, as Cost Explorer's); ``--month 2026-11`` means the whole
month. Without ``--out`` the file is named after the window, grain, basis and
``-incomplete`` when days have no bill.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analytics.errors import shown
from costapp.costs.export.build import Export, ExportSpec
from costapp.costs.export.files import csv_rows, parquet_write, summary_csv
from costapp.costs.export.reads import one_snapshot
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
        out = Path(out_name or f"{export.stem}.{w['format']}")
        summary = out.with_name(f"{out.stem}-summary.csv")
        # Both files are written beside their names and renamed when both are
        # whole: a scheduled job that picks up the file never reads half of
        # one, and a failed run leaves an earlier export where it was.
        data_part, summary_part = _partial(out), _partial(summary)
        try:
            if w["format"] == "parquet":
                with data_part.open("wb") as f:
                    parquet_write(export, f)
            else:
                lines = csv_rows(export)
                with data_part.open("w", newline="", encoding="utf-8") as f:
                    # A write per thousand lines, not per line: a year is 10^4+.
                    while chunk := "".join(itertools.islice(lines, 1000)):
                        f.write(chunk)
            with summary_part.open("w", newline="", encoding="utf-8") as f:
                f.writelines(summary_csv(export))
            os.replace(data_part, out)
            os.replace(summary_part, summary)
        finally:
            data_part.unlink(missing_ok=True)
            summary_part.unlink(missing_ok=True)
        complete = (
            "" if export.coverage.complete else " (incomplete: days without a bill)"
        )
        self.stdout.write(f"wrote {out} and {summary}{complete}")


def _partial(path: Path) -> Path:
    """Where ``path`` is written until it is whole: its own folder (so the
    rename is atomic), a hidden name no export is ever given."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}")
