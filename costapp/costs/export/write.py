"""Finance exports written to files: by ``manage.py costs_export`` and, each
month, to a folder or an S3 prefix (``month_export_write``, on the beat).

A file is written beside its name and renamed when whole, so a job that
picks it up never reads half of one, and a failed run leaves an earlier
export where it was.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from django.conf import settings

from costapp.costs.export.build import By, Export, ExportSpec, Format
from costapp.costs.export.files import csv_rows, parquet_write, summary_csv
from costapp.costs.export.reads import one_snapshot
from costapp.costs.selectors import Basis

logger = logging.getLogger(__name__)

FORMATS: tuple[Format, ...] = ("csv", "parquet")


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until it is whole: its own folder (so the
    rename is atomic), a hidden name no export is ever given."""
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def export_files_write(export: Export, out: Path) -> tuple[Path, Path]:
    """The data file at ``out`` and its summary beside it (``-summary.csv``)."""
    summary = out.with_name(f"{out.stem}-summary.csv")
    data_part, summary_part = partial_path(out), partial_path(summary)
    try:
        if export.spec.format == "parquet":
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
    return out, summary


def previous_month(today: date) -> tuple[date, date]:
    """[first day, first day of the next) of the month before ``today``'s."""
    end = today.replace(day=1)
    return (end - timedelta(days=1)).replace(day=1), end


@dataclass(frozen=True)
class Target:
    """Where month-end exports go: a folder, or an S3 bucket and prefix."""

    folder: Path | None = None
    bucket: str = ""
    prefix: str = ""

    @classmethod
    def parse(cls, text: str) -> Target:
        """``s3://bucket/prefix`` or an absolute folder path; ValueError
        naming the setting and value otherwise."""
        name = "COSTAPP_MONTHLY_EXPORT_TO"
        if text.startswith("s3://"):
            bucket, _, prefix = text[5:].partition("/")
            if not bucket:
                raise ValueError(f"{name}={text!r}: s3://bucket/prefix")
            return cls(bucket=bucket, prefix=prefix.strip("/"))
        folder = Path(text)
        if not folder.is_absolute():
            raise ValueError(
                f"{name}={text!r}: an absolute folder or s3://bucket/prefix"
            )
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise ValueError(f"{name}={text!r}: not a writable folder")
        return cls(folder=folder)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def has(self, name: str) -> bool:
        if self.folder is not None:
            return (self.folder / name).exists()
        import boto3
        from botocore.exceptions import ClientError

        try:
            boto3.client("s3").head_object(Bucket=self.bucket, Key=self.key(name))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise
        return True


def month_export_write(
    *, today: date, target: Target, basis: Basis = "amortized", by: By = "deployment"
) -> list[str]:
    """The previous month's export by day, as CSV and Parquet with their
    summary, written to ``target``; the names written. A month already
    exported under its name is not written again: an ``-incomplete`` export
    (days without a bill) is followed by the complete one once the bill is,
    under its own name."""
    start, end = previous_month(today)
    written: list[str] = []
    with one_snapshot(), tempfile.TemporaryDirectory() as tmp:
        for fmt in FORMATS:
            spec = ExportSpec(start=start, end=end, by=by, basis=basis, format=fmt)
            export = Export(spec)
            name = f"{export.stem}.{fmt}"
            if target.has(name):
                continue
            folder = target.folder or Path(tmp)
            out, summary = export_files_write(export, folder / name)
            if target.folder is None:
                import boto3

                client = boto3.client("s3")
                # The summary first: a reader that sees the data file finds
                # what reconciles it.
                for path in (summary, out):
                    client.upload_file(str(path), target.bucket, target.key(path.name))
            written += [n for n in (out.name, summary.name) if n not in written]
    if written:
        logger.info(
            "month-end export of %s written to %s: %s",
            f"{start:%Y-%m}",
            settings.COSTAPP_MONTHLY_EXPORT_TO,
            ", ".join(written),
        )
    return written
