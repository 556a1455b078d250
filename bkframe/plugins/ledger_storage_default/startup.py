"""What the ``default`` storage does as it opens, and as it first opens each index.

At open it reads the ledger table (one file) and lists the index directory (names only):
an index file the table does not know is **adopted** -- an index of a bkframe that kept the
state only in index headers, or one whose table slot a crash took before a checkpoint --
and one whose header never reached the disk is removed. Nothing else is opened: a bookie
holding 10^5 ledgers restarts in the time it takes to read one table.

Each index is then checked as it is opened (:func:`lost_records`): after a power cut an
index can point past the end of its entry log.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np

from bkframe.core.interfaces.entry_log import EntryLogManager

from .ledger_index import HEADER_SIZE, IndexCorruptError, LedgerIndex, decode_header
from .ledger_table import LedgerTable

#: The storage's logger, as before this module was split from it: one name for its messages.
log = logging.getLogger("bkframe.plugins.ledger_storage_default.storage")

_INDEX_NAME = re.compile(r"^([0-9a-f]{16})\.idx$")


def adopt_orphans(index_dir: Path, table: LedgerTable) -> bool:
    """Put every index file of ``index_dir`` that ``table`` does not know into it (its state
    from the file's header); return whether files were removed (the directory then needs an
    fsync)."""
    removed = False
    for name in sorted(os.listdir(index_dir)):
        m = _INDEX_NAME.match(name)
        if not m or int(m.group(1), 16) in table.states:
            continue
        ledger_id = int(m.group(1), 16)
        path = index_dir / name
        with open(path, "rb") as f:
            head = f.read(HEADER_SIZE)
        if not any(head):
            # Created after the last checkpoint and never written back: a checkpoint
            # fsyncs every header before LastLogMark moves, so the journal still has
            # whatever this ledger held and replay recreates it.
            log.warning("index file %s was never written (crash before a checkpoint); removing it", path)
            path.unlink()
            removed = True
            continue
        state = decode_header(head, path)
        if state.ledger_id != ledger_id:
            raise IndexCorruptError(f"index file {path} holds ledger {state.ledger_id}, but its name says {ledger_id}")
        table.put(state)
    return removed


def lost_records(idx: LedgerIndex, entry_logs: EntryLogManager) -> np.ndarray:
    """The entry ids whose index records point past the end of their entry log (or into a
    log that is not there): after a power cut the index can be ahead of the logs, since
    index pages reach the disk on their own schedule.

    Those entries are simply not here any more, and the storage drops them: saying so ("no
    such entry", or UNKNOWN in limbo) is true, where a read would only fail. Journal replay
    re-adds what the journal holds, and BP-46 repair copies back what a limbo ledger should
    hold. The storage checks each index as it opens it, before any use; a record written in
    this run always lies within its log, so the check finds only what a crash left. The
    table is read a chunk at a time, never through unallocated pages of its mapping
    (:meth:`.ledger_index.LedgerIndex.held`): on a full tmpfs a read of a hole there would
    kill the bookie.
    """
    sizes: dict[int, int] = {}
    found = []
    for held, rows in idx.held():
        logs, inverse = np.unique(rows["log_id"], return_inverse=True)
        for log_id in logs.tolist():
            if log_id not in sizes:
                sizes[log_id] = entry_logs.log_size(log_id)
        limits = np.array([sizes[log_id] for log_id in logs.tolist()], dtype=np.uint64)[inverse]
        ends = rows["offset"] + rows["length"].astype(np.uint64)
        found.append(held[ends > limits])
    lost = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
    if lost.size:
        log.warning(
            "ledger %d: %d entries (ids %d..%d) point past the end of their entry log (its tail was "
            "lost in a crash); dropped from the index as missing here",
            idx.state.ledger_id, lost.size, int(lost[0]), int(lost[-1]),
        )
    return lost
