"""An upload handler that stops reading a file at COSTAPP_UPLOAD_MAX_BYTES.

It runs first in FILE_UPLOAD_HANDLERS, so a file over the limit is cut off while
it streams in: the bytes past the limit are never written to memory or disk,
and the parse stops there (``StopUpload``). The view reads
``request.upload_refused`` to say why the file is missing.

What is counted is the bytes received, every file of the request together: a
declared length (Content-Length) over the limit is refused before anything is
read, but one under it proves nothing, and two files of half the limit each are
one limit's worth of disk.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

# Room for the form's other fields and the multipart boundaries.
OVERHEAD_BYTES = 64 * 1024


def upload_refused(request: Any) -> str:
    """Why an upload of this request was cut off, or ""."""
    return str(getattr(request, "upload_refused", ""))


class CappedUploadHandler(FileUploadHandler):
    def __init__(self, request: Any = None) -> None:
        super().__init__(request)
        self.limit = int(settings.COSTAPP_UPLOAD_MAX_BYTES)
        self.request_length = 0
        self.received = 0

    def handle_raw_input(
        self,
        input_data: Any,
        META: Any,
        content_length: int,
        boundary: Any,
        encoding: str | None = None,
    ) -> None:
        self.request_length = content_length
        return None

    def _refuse(self, why: str) -> None:
        if self.request is not None:
            self.request.upload_refused = (  # type: ignore[attr-defined]
                f"file={self.file_name!r}: {why}; the limit is {self.limit:,} bytes "
                "(COSTAPP_UPLOAD_MAX_BYTES)"
            )
        raise StopUpload(connection_reset=True)

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        if self.request_length > self.limit + OVERHEAD_BYTES:
            # The client said how much it sends: refuse before reading any.
            self._refuse(f"the request is {self.request_length:,} bytes")

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self._refuse("larger than the upload limit")
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


# What a file's first bytes say it is (the formats users upload by mistake
# and the containers a bill may come in).
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip file"),
    (b"BZh", "a bzip2 file"),
    (b"PAR1", "a Parquet file"),
    (b"\xd0\xcf\x11\xe0", "an Office document"),
)
# The container each accepted suffix promises, longest suffix first; None: text.
CONTAINERS = (
    (".csv.gz", "a gzip file"),
    (".csv.zip", "a ZIP archive"),
    (".csv.bz2", "a bzip2 file"),
    (".parquet", "a Parquet file"),
    (".parq", "a Parquet file"),
    (".csv", None),
)
SNIFF_BYTES = 4096


def content_refusal(name: str, head: bytes) -> str:
    """Why a bill upload's first bytes are not what its name says, or "".

    Checked before anything decodes the file, so a PNG named .csv is refused
    as a PNG image, not with a codec's error about byte 0x89."""
    lowered = name.lower()
    want = next((kind for s, kind in CONTAINERS if lowered.endswith(s)), None)
    found = next((kind for magic, kind in SIGNATURES if head.startswith(magic)), None)
    if want is not None:
        if found == want:
            return ""
        return f"{found}, not {want}" if found else f"not {want}, as its name says"
    if found is not None:
        return f"{found}, not CSV text"
    sample = head[:SNIFF_BYTES]
    if b"\x00" in sample:
        return "binary data, not CSV text"
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample) - 3:  # not a character cut at the sample's end
            return f"not UTF-8 text (byte {exc.start}), not CSV text"
    return ""
