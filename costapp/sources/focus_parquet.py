"""A FOCUS Parquet file read in bounded memory (``costapp.sources.focus``).

A Parquet file is small because its values are encoded, and the footer says
how large everything is; neither can be trusted. One 1 kB string in a column's
dictionary, referenced by a million rows, fits in a 3 kB file and is 1 GB once
every row holds its own copy: the reader that expanded 50,000 rows at a time
took 1.2 GB and 166 s on such a file (and imported it). So, before any value
is decoded:

- the header of every page of the columns read is walked. The header is what
  the decoder trusts (it allocates ``uncompressed_page_size``), not the
  footer's totals; each page must stay within ``MAX_PAGE_BYTES`` and all of
  them within the file's decompression limit;

and while reading, row group by row group, ``BATCH_ROWS`` rows at a time:

- text columns come as dictionaries (Arrow never expands them);
- each batch's expanded size is computed on the Arrow arrays (the length of
  each dictionary value, taken through the indices) and counted against the
  same limit, and no cell may be longer than ``MAX_CELL_BYTES``, before any
  of it becomes Python objects;
- rows become Python objects ``SLICE_BYTES`` at a time.

The limit is the CSV reader's: COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES, and
COSTAPP_FOCUS_MAX_INFLATION times the file's size beyond 16 MiB.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BATCH_ROWS = 1024
# The longest cell read: a Tags object with dozens of tags fits; a 1 MB
# "service name" is not a bill.
MAX_CELL_BYTES = 64 * 1024
# Writers cut pages at about 1 MiB (Arrow, Spark and DuckDB by default).
MAX_PAGE_BYTES = 64 * 1024 * 1024
SLICE_BYTES = 8 * 1024 * 1024
# The footer's strings and lists (statistics, schema) while it is decoded.
THRIFT_STRING_BYTES = 32 * 1024 * 1024
THRIFT_CONTAINER_ITEMS = 1_000_000
MAX_HEADER_BYTES = 1024 * 1024
LIMITS = "COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES, COSTAPP_FOCUS_MAX_INFLATION"


class ParquetRefused(Exception):
    """Why the file is not read; the caller adds the file's name."""


# -- page headers -------------------------------------------------------------


class _Compact:
    """A Thrift compact-protocol struct in ``data``: fields 1-3 of the top
    level (a ``PageHeader``'s type and two sizes) and where it ends, the
    other fields skipped. Running out of ``data`` raises IndexError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        data, pos = self.data, self.pos
        value = shift = 0
        while shift < 64:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
        raise ParquetRefused("a page header holds a malformed number")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def advance(self, size: int) -> None:
        self.pos += size
        if self.pos > len(self.data):
            raise IndexError

    def skip(self, kind: int, depth: int, in_list: bool = False) -> None:
        if depth > 32:
            raise ParquetRefused("a page header is nested too deep")
        if kind in (1, 2):  # booleans: in the field header, a byte in a list
            if in_list:
                self.advance(1)
        elif kind == 3:
            self.advance(1)
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.advance(8)
        elif kind == 8:
            self.advance(self.varint())
        elif kind in (9, 10):
            header = self.data[self.pos]
            self.pos += 1
            size = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(header & 0x0F, depth + 1, in_list=True)
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.data[self.pos]
                self.pos += 1
                for _ in range(size):
                    self.skip(types >> 4, depth + 1, in_list=True)
                    self.skip(types & 0x0F, depth + 1, in_list=True)
        elif kind == 12:
            self.struct(depth + 1)
        else:
            raise ParquetRefused(f"a page header holds an unknown type {kind}")

    def struct(self, depth: int = 0) -> dict[int, int]:
        data = self.data
        found: dict[int, int] = {}
        last = 0
        while True:
            header = data[self.pos]
            self.pos += 1
            if header == 0:
                return found
            kind, delta = header & 0x0F, header >> 4
            last = last + delta if delta else self.zigzag()
            if 4 <= kind <= 6:  # integers, most of a page header
                value = self.varint()
                if depth == 0 and kind == 5 and last in (1, 2, 3):
                    found[last] = (value >> 1) ^ -(value & 1)
            elif kind == 12:
                if depth > 32:
                    raise ParquetRefused("a page header is nested too deep")
                self.struct(depth + 1)
            else:
                self.skip(kind, depth)


def _page_header(handle: IO[bytes], start: int) -> tuple[int, int, int]:
    """(header length, decompressed size, compressed size) of the page at
    ``start``."""
    window = 256
    while True:
        handle.seek(start)
        data = handle.read(window)
        header = _Compact(data)
        try:
            fields = header.struct()
        except IndexError:
            if len(data) < window:
                raise ParquetRefused("a page header is cut short") from None
            if window >= MAX_HEADER_BYTES:
                raise ParquetRefused(
                    f"a page header longer than {MAX_HEADER_BYTES:,} bytes"
                ) from None
            window *= 16
            continue
        return header.pos, fields.get(2, -1), fields.get(3, -1)


def page_bytes(path: Path, metadata: Any, columns: Collection[str]) -> int:
    """The decompressed size of every page of ``columns``, from the pages'
    own headers; refused past ``MAX_PAGE_BYTES`` for one page."""
    schema = metadata.schema
    read = [i for i in range(len(schema)) if schema.column(i).path in columns]
    total = 0
    with path.open("rb") as handle:
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            for c in read:
                chunk = group.column(c)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                    start = min(start, chunk.dictionary_page_offset)
                end = start + chunk.total_compressed_size
                while start < end:
                    length, size, packed = _page_header(handle, start)
                    if size < 0 or packed < 0:
                        raise ParquetRefused(
                            f"column {chunk.path_in_schema}: a malformed page header"
                        )
                    if size > MAX_PAGE_BYTES:
                        raise ParquetRefused(
                            f"column {chunk.path_in_schema}: a page decompresses "
                            f"to {size:,} bytes, more than the {MAX_PAGE_BYTES:,} "
                            "allowed for one page"
                        )
                    total += size
                    start += length + packed
    return total


# -- rows -----------------------------------------------------------------------


def _is_text(kind: Any) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _lengths(column: Any) -> Any:
    """The bytes of each cell of a text column (nulls 0), or None; a
    dictionary's values are measured once and taken through its indices."""
    if not _is_text(column.type):
        return None
    if pa.types.is_dictionary(column.type):
        sizes = pc.binary_length(column.dictionary)
        return pc.fill_null(pc.take(sizes, column.indices), 0)
    return pc.fill_null(pc.binary_length(column), 0)


def parquet_rows(
    path: Path,
    *,
    wanted: Collection[str],
    limit: int,
    batch_rows: int,
    check_header: Callable[[Sequence[str]], None],
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, row) of the ``wanted`` columns, in bounded memory."""
    options: dict[str, Any] = {
        "pre_buffer": False,
        "buffer_size": 1024 * 1024,
        "thrift_string_size_limit": THRIFT_STRING_BYTES,
        "thrift_container_size_limit": THRIFT_CONTAINER_ITEMS,
    }
    try:
        parquet = pq.ParquetFile(path, **options)
        schema = parquet.schema_arrow
    except Exception as exc:  # pyarrow raises several types; report any
        raise ParquetRefused(f"not a Parquet file: {exc}") from exc
    check_header(schema.names)
    columns = [name for name in schema.names if name in wanted]
    for name in columns:
        kind = schema.field(name).type
        if pa.types.is_nested(kind):
            # Arrow would expand its values before any could be measured;
            # the importer reads FOCUS columns (Tags too) as flat values.
            shape = "map" if pa.types.is_map(kind) else str(kind).split("<")[0]
            raise ParquetRefused(
                f"column {name} is a {shape}, not text, a number or a date"
            )
    metadata = parquet.metadata
    declared = sum(
        metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)
    )
    encoded = declared if declared > limit else page_bytes(path, metadata, columns)
    if encoded > limit:
        raise ParquetRefused(
            f"decompresses to {encoded:,} bytes, more than the {limit:,} "
            f"allowed ({LIMITS})"
        )
    texts = [name for name in columns if _is_text(schema.field(name).type)]
    expanded = 0
    n = 0
    try:
        parquet = pq.ParquetFile(
            path, metadata=metadata, read_dictionary=texts, **options
        )
        batches = parquet.iter_batches(
            batch_size=max(1, min(batch_rows, BATCH_ROWS)), columns=columns
        )
        for batch in batches:
            per_row: Any = pa.array([0] * batch.num_rows, pa.int64())
            for name, column in zip(batch.schema.names, batch.columns, strict=True):
                lengths = _lengths(column)
                if lengths is None:
                    size = column.nbytes
                    per_row = pc.add(per_row, size // max(1, batch.num_rows) + 1)
                    expanded += size
                    continue
                longest = pc.max(lengths).as_py() or 0
                if longest > MAX_CELL_BYTES:
                    at = pc.index(pc.greater(lengths, MAX_CELL_BYTES), True).as_py()
                    raise ParquetRefused(
                        f"row {n + at + 1}, column {name}: a value of {longest:,} "
                        f"bytes, more than the {MAX_CELL_BYTES:,} allowed in a cell"
                    )
                per_row = pc.add(per_row, lengths)
                expanded += pc.sum(lengths).as_py() or 0
            if expanded > limit:
                raise ParquetRefused(
                    f"decompresses to more than {limit:,} bytes by row "
                    f"{n + batch.num_rows:,} ({LIMITS}; text cells counted at "
                    "their full length, however the file encodes them)"
                )
            widest = max(1, pc.max(per_row).as_py() or 1)
            step = max(1, SLICE_BYTES // widest)
            for start in range(0, batch.num_rows, step):
                part = batch.slice(start, step)
                dense = [
                    c.dictionary_decode() if pa.types.is_dictionary(c.type) else c
                    for c in part.columns
                ]
                for row in pa.RecordBatch.from_arrays(
                    dense, names=part.schema.names
                ).to_pylist():
                    n += 1
                    yield n, row
    except ParquetRefused:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise ParquetRefused(f"not a readable Parquet file: {exc}") from exc
