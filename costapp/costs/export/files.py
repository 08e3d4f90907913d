"""The files of a finance export: CSV, Parquet, the summary, the ZIP.

Every writer consumes ``Export.rows()`` as it goes: nothing holds the rows.
CSV text goes through the one formula-safe writer (``costapp.csv_export``);
money is fixed-point text there and ``decimal128(28, 12)`` in Parquet.
"""

from __future__ import annotations

import itertools
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from costapp.costs.export.build import ROW_GROUP, SUMMARY_COLUMNS, Export
from costapp.costs.export.rows import SCHEMA_FIELDS
from costapp.csv_export import csv_lines

TEXTS_HELD = 100_000


def _text_cell(value: str) -> str:
    """One text cell exactly as the one formula-safe writer writes it
    (neutralised, quoted where needed): a row of it and a constant, cut."""
    line = list(csv_lines(["", "x"], [[value, "x"]]))[1]
    return line[: -len(",x\r\n")]


def csv_rows(export: Export) -> Iterator[str]:
    """The data CSV, line by line, as the one formula-safe writer
    (``costapp.csv_export``) writes it, byte for byte.

    A year is tens of thousands of rows of 22 cells, so a row is one f-string
    over its tuple: numbers are formatted in place (money comes as its
    fixed-point text, ``Export.rows(money_text=True)``; a float by ``repr``;
    they never need quoting) and the text cells (account,
    currency, deployment or team, pool, allocation, status: few distinct
    values) go through the writer once per distinct value, cached (and
    their joined text, with the day counts, once per distinct combination).
    tests/costs/test_exports.py checks the bytes against ``csv_lines``.
    """
    yield from csv_lines(export.spec.columns, [])
    cells: dict[str, str] = {}
    texts: dict[tuple[Any, ...], str] = {}

    def t(value: str) -> str:
        cell = cells.get(value)
        if cell is None:
            cell = cells[value] = _text_cell(value)
        return cell

    last: tuple[Any, ...] = ()
    head = ""
    for (
        period, period_days, account, currency, basis, target, pool, allocation,
        status, d_final, d_estimated, d_provisional, bill, provisional, requests,
        prompt, generation, gpu_hours, nominal, per_1k, per_1m, per_gpu_hour,
    ) in export.rows(money_text=True):  # fmt: skip
        # A period's rows come together: its date is written once.
        if (period, period_days) != last:
            last = (period, period_days)
            head = f"{period.isoformat()},{period_days},"
        # The seven text cells and the day counts after them repeat row
        # after row (a day's row is 1,0,0 or so): one lookup for all.
        key = (account, currency, basis, target, pool, allocation, status,
               d_final, d_estimated, d_provisional)  # fmt: skip
        text = texts.get(key)
        if text is None:
            if len(texts) > TEXTS_HELD:  # bounded, whatever the fleet
                texts.clear()
            text = texts[key] = (
                ",".join(map(t, key[:7])) + f",{d_final},{d_estimated},{d_provisional}"
            )
        yield (
            f"{head}{text},{bill},{provisional},"
            f"{'' if requests is None else repr(requests)},"
            f"{'' if prompt is None else repr(prompt)},"
            f"{'' if generation is None else repr(generation)},"
            f"{'' if gpu_hours is None else repr(gpu_hours)},{nominal},"
            f"{per_1k},{per_1m},{per_gpu_hour}\r\n"
        )


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
    rows = export.rows()
    while batch := list(itertools.islice(rows, ROW_GROUP)):
        columns = [
            pa.array(values, type=t)
            for values, (_, t) in zip(
                zip(*batch, strict=True), SCHEMA_FIELDS, strict=True
            )
        ]
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
    # Entries dated when written (zipfile's default is 1980-01-01), in UTC.
    stamp = datetime.now(UTC).timetuple()[:6]

    def entry_info(name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, date_time=stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        return info

    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_DEFLATED) as zf:  # type: ignore[call-overload]
        ext = export.spec.format
        with zf.open(
            entry_info(f"{export.stem}.{ext}"), "w", force_zip64=True
        ) as entry:
            if ext == "parquet":
                for _ in parquet_groups(export, entry):
                    yield pipe.take()
            else:
                for i, line in enumerate(csv_rows(export)):
                    entry.write(line.encode())
                    if i % 1000 == 999:
                        yield pipe.take()
        yield pipe.take()
        with zf.open(entry_info(f"{export.stem}-summary.csv"), "w") as entry:
            for line in summary_csv(export):
                entry.write(line.encode())
    yield pipe.take()
