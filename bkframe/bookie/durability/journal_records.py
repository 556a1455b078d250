"""What the bookie writes into journal records, and how it reads them back at replay.

The journal plugin frames and checksums records; their content is defined here so that
every journal plugin replays the same way. All integers are little-endian.

======== ===================================================================
type     body after the 1-byte type
======== ===================================================================
ENTRIES  ledger u64, count u32, max piggybacked LAC i64, then count times (entry_id i64, length u32), then the
         entries' bytes back to back
MASTER   ledger u64, ledger_type u16, key (rest of record)
FENCE    ledger u64
LAC      ledger u64, lac i64
STORED   ledger u64, count u32, max piggybacked LAC i64, then count times (entry_id i64, log_id u64,
         offset u64, record length u32, CRC32C of the entry's data u32): large PD entries written
         once, to an entry log that was fsynced before their ack (see docs/ledger-types.md)
======== ===================================================================
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import Final

import attrs
import numpy as np

from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError


class RecordType(enum.IntEnum):
    ENTRIES = 1
    MASTER = 2
    FENCE = 3
    LAC = 4
    STORED = 5


#: The ENTRIES type as a plain int: packed per add, without the enum's attribute lookup.
_ENTRIES: Final = int(RecordType.ENTRIES)


_ENTRIES_HEAD: Final = struct.Struct("<BQIq")
_ENTRY_DIR = np.dtype([("entry_id", "<i8"), ("length", "<u4")])
#: One row of the ENTRIES directory (the same bytes as a row of ``_ENTRY_DIR``).
_ENTRY_ROW: Final = struct.Struct("<qI")
_MASTER = struct.Struct("<BQH")
_FENCE = struct.Struct("<BQ")
_LAC = struct.Struct("<BQq")
_STORED_HEAD = struct.Struct("<BQIq")
_STORED_DIR = np.dtype(
    [("entry_id", "<i8"), ("log_id", "<u8"), ("offset", "<u8"), ("length", "<u4"), ("crc", "<u4")]
)


def entries_record(
    ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer], lac: int
) -> list[Buffer]:
    """The parts of one ENTRIES record (pass to ``Journal.append``; no data is copied)."""
    head = _ENTRIES_HEAD.pack(_ENTRIES, ledger_id, len(entry_ids), lac)
    if len(entry_ids) == 1:
        # One append in flight: a struct, not numpy's per-call cost of arrays.
        return [head, _ENTRY_ROW.pack(entry_ids[0], len(entries[0])), entries[0]]
    directory = np.empty(len(entry_ids), dtype=_ENTRY_DIR)
    directory["entry_id"] = entry_ids
    directory["length"] = [len(e) for e in entries]
    return [head, directory.tobytes(), *entries]


def master_record(ledger_id: int, ledger_type: int, master_key: bytes) -> list[Buffer]:
    return [_MASTER.pack(RecordType.MASTER, ledger_id, ledger_type), master_key]


def fence_record(ledger_id: int) -> list[Buffer]:
    return [_FENCE.pack(RecordType.FENCE, ledger_id)]


def lac_record(ledger_id: int, lac: int) -> list[Buffer]:
    return [_LAC.pack(RecordType.LAC, ledger_id, lac)]


def stored_record(ledger_id: int, lac: int, located: Sequence[tuple[int, int, int, int, int]]) -> list[Buffer]:
    """The parts of one STORED record: ``located`` holds ``(entry_id, log_id, offset, length,
    crc)`` of entries whose data is in an entry log, not in the journal."""
    directory = np.array(located, dtype=_STORED_DIR)
    return [_STORED_HEAD.pack(RecordType.STORED, ledger_id, len(located), lac), directory.tobytes()]


@attrs.frozen
class StoredEntry:
    """Where a STORED record says an entry's record is, and the CRC32C of its data."""

    entry_id: int
    log_id: int
    offset: int
    length: int
    crc: int


@attrs.frozen
class StoredRecord:
    ledger_id: int
    entries: tuple[StoredEntry, ...]
    lac: int


@attrs.frozen
class EntriesRecord:
    ledger_id: int
    entry_ids: tuple[int, ...]
    entries: tuple[memoryview, ...]
    lac: int


@attrs.frozen
class MasterRecord:
    ledger_id: int
    ledger_type: int
    master_key: bytes


@attrs.frozen
class FenceRecord:
    ledger_id: int


@attrs.frozen
class LacRecord:
    ledger_id: int
    lac: int


Record = EntriesRecord | MasterRecord | FenceRecord | LacRecord | StoredRecord


class BadRecordError(BKError, ValueError):
    """A record that passed the journal's CRC but does not parse: a bug or a foreign file."""


def decode(record: bytes) -> Record:
    """Parse one record as written by the functions above."""
    if not record:
        raise BadRecordError("empty journal record")
    kind = record[0]
    try:
        if kind == RecordType.ENTRIES:
            _, ledger_id, count, lac = _ENTRIES_HEAD.unpack_from(record)
            start = _ENTRIES_HEAD.size
            directory = np.frombuffer(record, dtype=_ENTRY_DIR, count=count, offset=start)
            pos = start + count * _ENTRY_DIR.itemsize
            view = memoryview(record)
            entries = []
            for length in directory["length"].tolist():
                entries.append(view[pos : pos + length])
                pos += length
            if pos != len(record):
                raise BadRecordError(f"ENTRIES record is {len(record)} bytes but its directory says {pos}")
            return EntriesRecord(ledger_id, tuple(directory["entry_id"].tolist()), tuple(entries), lac)
        if kind == RecordType.STORED:
            _, ledger_id, count, lac = _STORED_HEAD.unpack_from(record)
            if len(record) != _STORED_HEAD.size + count * _STORED_DIR.itemsize:
                raise BadRecordError(f"STORED record is {len(record)} bytes for {count} entries")
            rows = np.frombuffer(record, dtype=_STORED_DIR, count=count, offset=_STORED_HEAD.size)
            return StoredRecord(ledger_id, tuple(StoredEntry(*row) for row in rows.tolist()), lac)
        if kind == RecordType.MASTER:
            _, ledger_id, ledger_type = _MASTER.unpack_from(record)
            return MasterRecord(ledger_id, ledger_type, bytes(record[_MASTER.size :]))
        if kind == RecordType.FENCE:
            _, ledger_id = _FENCE.unpack(record)
            return FenceRecord(ledger_id)
        if kind == RecordType.LAC:
            _, ledger_id, lac = _LAC.unpack(record)
            return LacRecord(ledger_id, lac)
    except (struct.error, ValueError) as e:
        if isinstance(e, BadRecordError):
            raise
        raise BadRecordError(f"journal record of type {kind} does not parse: {e}") from None
    raise BadRecordError(f"unknown journal record type {kind}")
