"""An entry as it is stored in an entry log: ``length u32, ledger_id u64, entry_id i64, data``.

``length`` counts the data bytes. The record describes itself so that logs can be scanned
without the indexes (garbage collection, rebuilding an index) and so that a read can check
that the index pointed at the entry it expected. The index stores each record's whole
length (header included), so a stored entry never has length 0.
"""

from __future__ import annotations

import struct

import numpy as np

from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.storage_kit.entry_log_files import EntryLogError

#: Entry record header in the entry log: data length, ledger id, entry id.
ENTRY_RECORD = struct.Struct("<IQq")
#: The same as an array's fields, to check many records at once, and its byte positions.
RECORD_HEADER_DTYPE = np.dtype([("length", "<u4"), ("ledger_id", "<u8"), ("entry_id", "<i8")])
RECORD_HEADER_BYTES = np.arange(ENTRY_RECORD.size)

#: What :func:`read_record` finds instead of the record: the log does not hold it...
LOST = object()
#: ...or holds other bytes there.
CORRUPT = object()


def read_record(
    entry_logs: EntryLogManager, log_id: int, offset: int, length: int, ledger_id: int, entry_id: int
) -> bytes | object:
    """The entry's whole record; :data:`LOST` if the log does not hold it (shorter, gone,
    or zeros there: never written); :data:`CORRUPT` if other bytes are there. An I/O
    error is raised: it says nothing about the entry."""
    try:
        raw = entry_logs.read(log_id, offset, length)
    except EntryLogError:  # short read or no such log
        return LOST
    if length < ENTRY_RECORD.size:
        return CORRUPT
    data_len, rec_ledger, rec_entry = ENTRY_RECORD.unpack_from(raw)
    if (rec_ledger, rec_entry, data_len + ENTRY_RECORD.size) == (ledger_id, entry_id, length):
        return raw
    return LOST if not any(raw[: ENTRY_RECORD.size]) else CORRUPT
