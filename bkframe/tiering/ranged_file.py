"""A read-only file over byte ranges of a tier's object, for pyarrow to read through.

pyarrow reads a Parquet file by seeking and reading: the footer at the end, then the
column chunks of the row groups it decodes. Here those bytes come from *windows* fetched
beforehand (the footer, a row group: one ranged get each) and, for any read outside them,
from a ``fetch`` callable (a tier's ``get_range``, counted) -- or, without one, a read
outside the windows is an error: the async readers fetch every range on the event loop's
side, under their deadlines, and decode in a thread that must not touch the tier.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import attrs

Fetch = Callable[[int, int], bytes]


class OutsideWindowsError(OSError):
    """A read outside the fetched windows, with nothing to fetch it (a planning bug)."""


@attrs.define
class Fetches:
    """The ranged gets a reader made, and their bytes."""

    requests: int = 0
    bytes: int = 0


class RangedFile(io.RawIOBase):
    """An object of ``size`` bytes, seen through ``windows`` (offset -> bytes) and ``fetch``."""

    def __init__(
        self, size: int, windows: dict[int, bytes] | None = None, fetch: Fetch | None = None, fetches: Fetches | None = None
    ) -> None:
        super().__init__()
        self.size = size
        self._windows = sorted((windows or {}).items())
        self._fetch = fetch
        self.fetches = fetches if fetches is not None else Fetches()
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to {base + offset}, before the object's start")
        self._at = base + offset
        return self._at

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        n = max(0, min(len(buffer), self.size - self._at))
        if n:
            buffer[:n] = self.read_range(self._at, n)
            self._at += n
        return n

    def read_range(self, offset: int, length: int) -> bytes | memoryview:
        """``length`` bytes from ``offset`` (within the object)."""
        for start, data in self._windows:
            if start <= offset and offset + length <= start + len(data):
                return memoryview(data)[offset - start : offset - start + length]
        if self._fetch is None:
            raise OutsideWindowsError(f"bytes {offset}..{offset + length} of the object were not fetched")
        data = self._fetch(offset, length)
        self.fetches.requests += 1
        self.fetches.bytes += len(data)
        if len(data) != length:
            raise OSError(f"asked for bytes {offset}..{offset + length} of a {self.size}-byte object, got {len(data)}")
        return data
