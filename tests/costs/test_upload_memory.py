"""Issue 28: uploads read in bounded memory, sizes measured, never believed.

A 3 kB Parquet file whose text columns share one dictionary entry per column
used to take 1.2 GB and 166 s (it was then imported); the limits are those of
the CSV reader (COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES and _MAX_INFLATION)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from costapp.models import CostLine, IngestRun
from costapp.sources.focus import FocusError, FocusSource
from costapp.sources.focus_parquet import MAX_CELL_BYTES
from tests.costs.test_focus import import_file, sample_rows
from tests.support.users import user_in

ROOT = Path(__file__).resolve().parents[2]
PEAK_MB = 300
# The measured process prints its own peak. ru_maxrss survives fork and exec,
# so it is started by a bare interpreter (-S, a few MB), not by pytest's.
LAUNCH = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
CHILD = """
import json, resource, sys, time
started = time.monotonic()
from costapp.sources.focus import FocusError, FocusSource
try:
    FocusSource(uri=sys.argv[1]).scan()
    outcome = "imported"
except FocusError as exc:
    outcome = str(exc)
print(json.dumps({
    "outcome": outcome,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "seconds": time.monotonic() - started,
}))
"""


def focus_values(**text: str) -> dict[str, str]:
    """One valid FOCUS row, every column text."""
    row = {
        "BilledCost": "1.5",
        "EffectiveCost": "1.5",
        "ListCost": "1.5",
        "BillingAccountId": "111122223333",
        "SubAccountId": "111122223333",
        "BillingCurrency": "USD",
        "ChargeCategory": "Usage",
        "BillingPeriodStart": "2024-09-01T00:00:00Z",
        "BillingPeriodEnd": "2024-10-01T00:00:00Z",
        "ChargePeriodStart": "2024-09-02T00:00:00Z",
        "ChargePeriodEnd": "2024-09-02T01:00:00Z",
        "ServiceName": "EC2",
    }
    row.update(text)
    return row


def dictionary_bomb(path: Path, *, rows: int, **text: str) -> Path:
    """Every column one dictionary entry that all ``rows`` rows point to."""
    zeros = pa.array(np.zeros(rows, dtype=np.int32))
    table = pa.table(
        {
            name: pa.DictionaryArray.from_arrays(zeros, pa.array([value]))
            for name, value in focus_values(**text).items()
        }
    )
    pq.write_table(
        table,
        path,
        compression="zstd",
        row_group_size=rows,
        write_statistics=False,
        max_rows_per_page=rows,
        data_page_size=1 << 30,
        store_schema=False,
    )
    return path


def peak_of_import(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-S", "-c", LAUNCH, sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        pytest.param(
            {
                "ServiceName": "S" * 1000,
                "ResourceId": "r" * 1000,
                "x_UsageType": "u" * 1000,
                "ConsumedUnit": "h" * 1000,
                "Tags": json.dumps({"application": "a" * 990}),
            },
            "bomb.parquet: decompresses to more than 16,777,216 bytes by row ",
            id="five-1kB-columns-x-1M-rows",
        ),
        pytest.param(
            {"ResourceId": "r" * (10 << 20)},
            "bomb.parquet: row 1, column ResourceId: a value of 10,485,760 bytes, "
            f"more than the {MAX_CELL_BYTES:,} allowed in a cell",
            id="one-10MB-string-x-1M-rows",
        ),
    ],
)
def test_a_parquet_dictionary_bomb_is_refused_in_a_bounded_process(
    tmp_path: Path, text: dict[str, str], refusal: str
) -> None:
    bomb = dictionary_bomb(tmp_path / "bomb.parquet", rows=1_000_000, **text)
    assert bomb.stat().st_size < 16 * 1024
    # The footer declares less than the limit: that is not what the rows hold.
    assert pq.ParquetFile(bomb).metadata.row_group(0).total_byte_size < 16 << 20
    got = peak_of_import(bomb)
    assert refusal in got["outcome"]
    assert "nothing was imported" in got["outcome"]
    assert got["peak_mb"] < PEAK_MB, got
    assert got["seconds"] < 60, got


def _varint(value: int, length: int = 0) -> bytes:
    out = []
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value and len(out) >= length:
            break
    return bytes([b | 0x80 for b in out[:-1]] + [out[-1]])


def lie_about_sizes(path: Path, said: int = 1000) -> None:
    """Rewrite the footer so that the row group and its column chunks say
    they decompress to ``said`` bytes (same byte length, longer varints)."""
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(0)
    sizes = {group.total_byte_size} | {
        group.column(i).total_uncompressed_size for i in range(group.num_columns)
    }
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length : -8]
    for size in (s for s in sizes if s >= 1 << 14):
        real = _varint(size << 1)  # zigzag of a positive i64
        footer = footer.replace(real, _varint(said << 1, len(real)))
    path.write_bytes(data[: -8 - length] + footer + data[-8:])


@pytest.mark.smoke
def test_a_parquet_footer_that_understates_its_pages_is_measured_not_believed(
    tmp_path: Path,
) -> None:
    rows = 20_000
    table = pa.table(
        {
            **{k: [v] * rows for k, v in focus_values().items()},
            "ResourceId": [f"{i:08d}" + "r" * 1000 for i in range(rows)],
        }
    )
    path = tmp_path / "liar.parquet"
    pq.write_table(table, path, compression="zstd", write_statistics=False)
    lie_about_sizes(path)
    group = pq.ParquetFile(path).metadata.row_group(0)
    assert group.total_byte_size == 1000
    assert path.stat().st_size < 1 << 20  # 20 MB of pages in under 1 MB
    with pytest.raises(FocusError) as caught:
        FocusSource(uri=str(path)).scan()
    message = str(caught.value)
    assert message.startswith("liar.parquet: decompresses to 2")
    assert "more than the 16,777,216 allowed" in message
    assert "COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES" in message


@pytest.mark.smoke
def test_a_parquet_cell_longer_than_the_cap_is_refused_naming_row_and_column(
    tmp_path: Path,
) -> None:
    rows = [focus_values() for _ in range(3)]
    rows[2]["Tags"] = json.dumps({"application": "a" * MAX_CELL_BYTES})
    table = pa.table({k: [r.get(k) for r in rows] for k in rows[2]})
    pq.write_table(table, tmp_path / "tags.parquet")
    with pytest.raises(FocusError) as caught:
        FocusSource(uri=str(tmp_path / "tags.parquet")).scan()
    assert str(caught.value).startswith(
        f"tags.parquet: row 3, column Tags: a value of {MAX_CELL_BYTES + 19:,} bytes"
    )


@pytest.mark.smoke
def test_a_nested_column_is_refused_before_arrow_expands_it(tmp_path: Path) -> None:
    table = pa.table(
        {
            **{k: [v] for k, v in focus_values().items()},
            "Tags": pa.array(
                [[("application", "chat")]], pa.map_(pa.string(), pa.string())
            ),
        }
    )
    pq.write_table(table, tmp_path / "map.parquet")
    with pytest.raises(FocusError) as caught:
        FocusSource(uri=str(tmp_path / "map.parquet")).scan()
    assert str(caught.value) == (
        "map.parquet: column Tags is a map, not text, a number or a date; "
        "nothing was imported"
    )


class _LyingBody:
    """An S3 body longer than the length the answer declared."""

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)
        self.read_bytes = 0

    def iter_chunks(self, size: int) -> Any:
        while chunk := self.stream.read(size):
            self.read_bytes += len(chunk)
            yield chunk

    def close(self) -> None:
        self.stream.close()


class _LyingS3:
    def __init__(self, data: bytes) -> None:
        self.body = _LyingBody(data)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        return {"ContentLength": 10, "Body": self.body}


def test_an_s3_object_larger_than_it_says_is_cut_off_at_the_limit() -> None:
    client = _LyingS3(b"x" * (10 << 20))
    before = set(Path(tempfile.gettempdir()).glob("focus-*"))
    source = FocusSource(
        uri="s3://exports/focus/big.csv", s3_client=client, max_bytes=4096
    )
    with pytest.raises(FocusError) as caught:
        source.scan()
    assert str(caught.value) == (
        "s3://exports/focus/big.csv: more than the 4,096 bytes allowed "
        "(COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES)"
    )
    assert client.body.read_bytes <= 1 << 20  # one chunk, not 10 MB
    assert set(Path(tempfile.gettempdir()).glob("focus-*")) == before


def test_an_upload_that_says_it_is_small_is_counted_as_it_is_stored(
    settings: Any, tmp_path: Path
) -> None:
    from costapp.costs.services import BillsError
    from costapp.costs.views import _store_upload

    settings.COSTAPP_UPLOAD_DIR = tmp_path
    settings.COSTAPP_UPLOAD_MAX_BYTES = 4096
    upload = SimpleUploadedFile("small.csv", b"x" * 100_000)
    upload.size = 10
    with pytest.raises(BillsError, match="larger than the upload limit of 4,096"):
        _store_upload(upload)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_two_files_under_the_limit_each_are_counted_together(
    client: Client, settings: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from costapp.costs import uploads

    client.force_login(user_in("lead", "tech lead", "admin"))
    settings.COSTAPP_UPLOAD_DIR = tmp_path
    settings.COSTAPP_UPLOAD_MAX_BYTES = 4096
    monkeypatch.setattr(uploads, "OVERHEAD_BYTES", 10 * 1024 * 1024)
    page = client.post(
        "/costs/focus/",
        {
            "file": SimpleUploadedFile("a.csv", b"a" * 3000),
            "other": SimpleUploadedFile("b.csv", b"b" * 3000),
        },
    )
    assert page.status_code == 200
    assert b"larger than the upload limit" in page.content
    assert not IngestRun.objects.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_a_parquet_import_of_the_sample_in_small_batches_still_matches_csv(
    tmp_path: Path,
) -> None:
    from tests.costs.conftest import cost_lines
    from tests.costs.test_focus import SAMPLE, write_parquet

    assert import_file(str(SAMPLE)).status == IngestRun.SUCCEEDED
    from_csv = cost_lines()
    CostLine.objects.all().delete()
    path = write_parquet(tmp_path / "sample.parquet", sample_rows())
    run = import_file(str(path), chunk_rows=3)
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert cost_lines() == from_csv
