"""The journal's files on disk: their names, header and record framing, and sync marks --
the one place the writer (:mod:`.fs_journal`, :mod:`.group_buffer`) and :mod:`.replay` read
the format from.

File ``DIR/{file_id:016x}.txn``: a 16-byte header (magic, version, file id), then records
``magic u32 | body length u32 | CRC32C(body) u32 | body``, then zeros (preallocated).

Every group commit starts (in each file it writes to) with a *sync mark*: a record of its
own magic whose 8-byte body is the offset up to which this file was fsynced when the group
was written -- where the last *completed* fdatasync ended. Replay uses it to tell a torn
tail from damage to acknowledged records (see :mod:`.replay`).
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

FILE_MAGIC = b"BKFJRNL1"
FILE_HEADER = struct.Struct("<8sII")  # magic, version, file id (low 32 bits)
#: Version 2 adds sync marks; version 1 files are still replayed.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

#: A record: magic, body length, CRC32C of the body; then the body.
RECORD_HEADER = struct.Struct("<III")
RECORD_MAGIC = 0xB0C4_1E55
#: A sync mark: a record with this magic and an 8-byte body, the file's fsynced end (u64).
SYNC_MAGIC = 0xB0C4_5CED
SYNC_BODY = struct.Struct("<Q")
SYNC_MARK_SIZE = RECORD_HEADER.size + SYNC_BODY.size


def pack_sync_mark(buf: bytearray, synced: int) -> None:
    """Write the sync mark recording ``synced`` into the first :data:`SYNC_MARK_SIZE` bytes of ``buf``."""
    body = SYNC_BODY.pack(synced)
    RECORD_HEADER.pack_into(buf, 0, SYNC_MAGIC, SYNC_BODY.size, crc32c.crc32c(body))
    buf[RECORD_HEADER.size : SYNC_MARK_SIZE] = body


def journal_path(directory: Path, file_id: int) -> Path:
    return directory / f"{file_id:016x}.txn"


def journal_file_ids(directory: Path) -> list[int]:
    """The ids of the journal files in ``directory``, ascending."""
    ids = []
    for p in directory.glob("*.txn"):
        try:
            ids.append(int(p.stem, 16))
        except ValueError:
            continue
    return sorted(ids)
