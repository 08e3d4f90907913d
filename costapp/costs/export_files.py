"""The files of a finance export: CSV, Parquet, the summary, the ZIP.

Every writer consumes ``Export.records()`` as it goes: nothing holds the rows.
CSV text goes through the one formula-safe writer (``costapp.csv_export``);
money is fixed-point text there and ``decimal128(28, 12)`` in Parquet.
"""

from __future__ import annotations

import itertools
import zipfile
from collections.abc import Iterator
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from costapp.costs.exports import ROW_GROUP, SCHEMA_FIELDS, SUMMARY_COLUMNS, Export
from costapp.csv_export import csv_lines


def csv_rows(export: Export) -> Iterator[str]:
    """The data CSV, line by line, through the one formula-safe writer."""
    names = [c for c, _ in SCHEMA_FIELDS]
    rows = ([r[c] for c in names] for r in export.records())
    return csv_lines(export.spec.columns, rows)


def summary_csv(export: Export) -> Iterator[str]:
    return csv_lines(SUMMARY_COLUMNS, export.summary_rows())


class _Counted:
    """A write-only stream that knows its position (Parquet asks ``tell``)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.n, self.closed = raw, 0, False

    def write(self, data: bytes) -> int:
        self.raw.write(data)
        self.n += len(data)
        return len(data)

    def tell(self) -> int:
        return self.n

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def parquet_groups(export: Export, out: IO[bytes]) -> Iterator[int]:
    """Write the Parquet file in row groups of ``ROW_GROUP`` rows, yielding
    after each so a streaming caller can hand the bytes on."""
    schema = pa.schema(
        [(export.spec.by if c == "target" else c, t) for c, t in SCHEMA_FIELDS]
    )
    writer = pq.ParquetWriter(pa.PythonFile(_Counted(out), mode="w"), schema)
    records = export.records()
    while batch := list(itertools.islice(records, ROW_GROUP)):
        columns = [pa.array([r[c] for r in batch], type=t) for c, t in SCHEMA_FIELDS]
        writer.write_batch(pa.record_batch(columns, schema=schema))
        yield len(batch)
    writer.close()
    yield 0


def parquet_write(export: Export, out: IO[bytes]) -> None:
    for _ in parquet_groups(export, out):
        pass


class _Pipe:
    """Bytes written by zipfile, handed on by the generator that owns it."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.n = 0

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        self.n += len(data)
        return len(data)

    def tell(self) -> int:
        return self.n

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


def zip_stream(export: Export) -> Iterator[bytes]:
    """A ZIP of the data file and its summary, produced as it is written
    (zipfile writes data descriptors when the output cannot seek)."""
    pipe = _Pipe()
    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_DEFLATED) as zf:  # type: ignore[call-overload]
        ext = export.spec.format
        with zf.open(f"{export.stem}.{ext}", "w", force_zip64=True) as entry:
            if ext == "parquet":
                for _ in parquet_groups(export, entry):
                    yield pipe.take()
            else:
                for i, line in enumerate(csv_rows(export)):
                    entry.write(line.encode())
                    if i % 1000 == 999:
                        yield pipe.take()
        yield pipe.take()
        with zf.open(f"{export.stem}-summary.csv", "w") as entry:
            for line in summary_csv(export):
                entry.write(line.encode())
    yield pipe.take()
