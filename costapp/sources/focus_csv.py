"""The byte cap of a FOCUS CSV (``costapp.sources.focus``): the file is
decompressed as pandas reads it, and the bytes that come out are counted, so a
gzip bomb is stopped at the limit, whatever the file says of itself. Also the
error every FOCUS reader raises."""

from __future__ import annotations

import io
from typing import Any

from costapp.sources.base import SourceError

NUL_MARK = "\ue000".encode()  # a private-use character standing for a NUL byte


class FocusError(SourceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


class CappedReader(io.RawIOBase):
    """A decompressing reader that refuses to inflate past a limit: a 204 kB
    gzip of 200 MiB is refused when the limit is reached, before pandas holds
    any of it."""

    def __init__(self, raw: Any, *, limit: int, name: str) -> None:
        self.raw = raw
        self.limit = limit
        self.name = name
        self.count = 0
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.pending:
            data = self.raw.read(max(1, len(buffer)))
            self.count += len(data)
            if self.count > self.limit:
                raise FocusError(
                    f"{self.name}: decompresses to more than {self.limit:,} bytes "
                    "(COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES, "
                    "COSTAPP_FOCUS_MAX_INFLATION); nothing was imported"
                )
            # pandas' CSV parser ends a cell at a NUL byte ("1234\x005678"
            # became "1234"): mark it so the row check can name the cell.
            self.pending = data.replace(b"\x00", NUL_MARK)
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size

    def close(self) -> None:
        self.raw.close()
        super().close()
