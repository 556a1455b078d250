"""A group commit's bytes for one journal file: built on the event loop, written by the
worker thread, with the large entries' bytes neither copied nor checksummed on the loop.

Records are framed ``magic u32 | body length u32 | CRC32C(body) u32 | body`` (see
:mod:`bkframe_journal_fs.file_format`). A record whose last part (an entry) is at least
:data:`PIECE_BYTES` long keeps its large parts where they are (the request frame they came
in, which nothing changes; the worker writes them from there) and has its CRC computed by
the worker thread, where ``crc32c`` releases the GIL. A record of small parts is copied
and checksummed on the loop as it comes: in the worker each small call would hold the GIL,
for no gain. Measured in docs/scaling.md ("Work off the event loop").
"""

from __future__ import annotations

from collections.abc import Sequence

import crc32c

from bkframe.core.interfaces import Buffer
from bkframe_journal_fs.file_format import RECORD_HEADER, RECORD_MAGIC

#: Parts at least this long are written from where they are, not copied.
PIECE_BYTES = 16 * 1024


class GroupBuffer:
    """The records of one group for one file, after ``lead`` reserved bytes (the sync mark)."""

    __slots__ = ("_deferred", "_pieces", "_tail", "file_id", "lead")

    def __init__(self, file_id: int, lead: int) -> None:
        self.file_id = file_id
        self.lead = bytearray(lead)
        self._tail = self.lead
        self._pieces: list[Buffer] = [self.lead]
        #: Records whose header the worker fills in: (buffer, offset, parts, length).
        self._deferred: list[tuple[bytearray, int, Sequence[Buffer], int]] = []

    def add(self, parts: Sequence[Buffer]) -> int:
        """Frame one record of ``parts``; return its length. Event loop."""
        tail = self._tail
        if not parts or len(parts[-1]) < PIECE_BYTES:
            # Small parts (the common case, kept as cheap as can be): copy and checksum here.
            crc = length = 0
            for part in parts:
                crc = crc32c.crc32c(part, crc)
                length += len(part)
            tail += RECORD_HEADER.pack(RECORD_MAGIC, length, crc)
            for part in parts:
                tail += part
            return length
        length = sum(len(part) for part in parts)
        self._deferred.append((tail, len(tail), parts, length))
        tail += bytes(RECORD_HEADER.size)
        for part in parts:
            if len(part) >= PIECE_BYTES:
                tail = self._tail = bytearray()
                self._pieces += (part, tail)
            else:
                tail += part
        return length

    def pieces(self) -> list[memoryview]:
        """Fill in the deferred headers; the bytes to write, in order. Worker thread."""
        for buf, at, parts, length in self._deferred:
            crc = 0
            for part in parts:
                crc = crc32c.crc32c(part, crc)
            RECORD_HEADER.pack_into(buf, at, RECORD_MAGIC, length, crc)
        return [memoryview(piece).cast("B") for piece in self._pieces if len(piece)]
