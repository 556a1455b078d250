"""Bookie counters, reported by GET_BOOKIE_INFO and ``bkframe bench``.

One mutable object per bookie, handed to every plugin factory so that storage plugins
count their own bytes and fsyncs. Plain ints: the bookie is one trio thread, and the
worker threads that fsync only hand results back to it.
"""

from __future__ import annotations

import attrs


@attrs.define
class Counters:
    entries_added: int = 0
    entries_read: int = 0
    #: Of those, entries sent in READ_BATCH answers.
    entries_read_in_batches: int = 0
    journal_bytes_written: int = 0
    journal_fsyncs: int = 0
    storage_bytes_written: int = 0
    storage_fsyncs: int = 0
    fenced_ledgers: int = 0
    write_closed_ledgers: int = 0
    requests: int = 0
    bad_requests: int = 0
    checkpoints: int = 0
    gc_ledgers_deleted: int = 0
    gc_bytes_freed: int = 0
    compacted_bytes: int = 0
    #: Adds answered IO_ERROR because ledger storage could not store them.
    storage_write_errors: int = 0
    #: Index records dropped because the entry-log bytes they point to are gone (a power
    #: cut lost the log's unsynced tail): found at open or by compaction.
    storage_entries_dropped: int = 0
    #: Journal groups lost to a write that found no space (their requests failed).
    journal_write_failures: int = 0
    #: Adds refused because the bookie is read-only.
    read_only_refusals: int = 0
    #: Large PD entries written once: entry log fsynced before the ack, a STORED record
    #: (their location) in the journal instead of their data.
    entries_written_once: int = 0
    #: STORED journal records whose entry-log record was not the entry at replay (never
    #: acknowledged: torn by the crash); not indexed.
    stored_entries_unreadable: int = 0

    @property
    def fsyncs(self) -> int:
        return self.journal_fsyncs + self.storage_fsyncs

    def as_dict(self) -> dict[str, int]:
        d = attrs.asdict(self)
        d["fsyncs"] = self.fsyncs
        return d
