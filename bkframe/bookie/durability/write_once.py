"""Large PD_JOURNAL entries written once: to the entry log only, with their location in the journal.

A PD add is acknowledged once durable. Journaling its data and storing it again in an
entry log writes every byte twice; for a large entry (at least the ledger storage's
``large_entry_bytes``) the bookie writes the data to the entry log only and journals a
small STORED record (ledger, entry, entry-log id, offset, length, CRC32C of the data). The
ack waits for BOTH the journal group's fsync and an fsync of the entry logs that covers the
write (:meth:`WriteOnceStorage.sync_entries`; one serves every add queued before it, and it
runs in a worker thread while the journal's own fsync runs in another). So an acknowledged
entry survives a power cut of every bookie, as PD promises.

Replay (:func:`apply_stored`): an entry storage already holds with that CRC is left alone
(its index reached the disk, perhaps pointing at a compacted copy); otherwise it is indexed
from the record the STORED record names, if that record is the entry and its CRC matches.
Only an add that was never acknowledged can fail that check (the crash took its unsynced
bytes), and it is then not indexed.

Compaction and GC need no pin on those locations: compaction removes a log only after the
copies are fsynced and the indexes pointing at them are durable, and replay looks at the
index first; a deleted ledger's entries are not brought back from a log GC removed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import crc32c

from bkframe.bookie.durability import journal_records as jr
from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import Journal
from bkframe.core.interfaces.ledger_storage import LedgerStorage, WriteOnceStorage
from bkframe.errors import BKError

log = logging.getLogger("bkframe.bookie")


def journal_written_once(
    journal: Journal,
    storage: WriteOnceStorage,
    ledger_id: int,
    entry_ids: Sequence[int],
    datas: Sequence[Buffer],
    lac: int,
) -> tuple[int, int]:
    """Journal a PD batch that ``storage`` has just stored: the large entries' locations (a
    STORED record), the others' data as usual. Return the last record's sequence and how
    many entries were written once (if any, the ack must also wait for ``sync_entries``)."""
    threshold = storage.large_entry_bytes
    small_ids: list[int] = []
    small: list[Buffer] = []
    located: list[tuple[int, int, int, int, int]] = []
    for entry_id, data in zip(entry_ids, datas):
        if len(data) >= threshold:
            located.append((entry_id, *storage.locate(ledger_id, entry_id), crc32c.crc32c(data)))
        else:
            small_ids.append(entry_id)
            small.append(data)
    if not located:
        return journal.append(jr.entries_record(ledger_id, entry_ids, datas, lac), ledger_id), 0
    if small_ids:
        journal.append(jr.entries_record(ledger_id, small_ids, small, lac), ledger_id)
    return journal.append(jr.stored_record(ledger_id, lac, located), ledger_id), len(located)


def apply_stored(storage: LedgerStorage, counters: Counters, rec: jr.StoredRecord) -> None:
    """Replay one STORED record into ``storage`` (see the module's docstring)."""
    if not isinstance(storage, WriteOnceStorage):
        raise BKError(
            f"the journal holds STORED records (large entries written once) but ledger storage {storage!r} "
            f"cannot index them; start the bookie with the ledger storage that wrote them"
        )
    for e in rec.entries:
        try:
            held = storage.get_entry(rec.ledger_id, e.entry_id)
        except Exception:  # noqa: BLE001 - whatever storage cannot read back is indexed again
            held = None
        if held is not None and crc32c.crc32c(held) == e.crc:
            continue
        if not storage.index_stored(rec.ledger_id, e.entry_id, e.log_id, e.offset, e.length, e.crc):
            counters.stored_entries_unreadable += 1
            log.warning(
                "replay: entry %d:%d is not where its STORED journal record says (entry log %08x offset %d): "
                "never acknowledged (a crash took it before the entry log's fsync); not indexed",
                rec.ledger_id, e.entry_id, e.log_id, e.offset,
            )
    if storage.ledger_state(rec.ledger_id) is not None:
        storage.set_lac(rec.ledger_id, rec.lac)
