"""What the ``default`` storage does as it opens: load the index files, and find the entries
whose bytes a power cut took from the entry logs."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bkframe.core.interfaces import EntryLogManager

from .ledger_index import HEADER_SIZE, IndexCorruptError, LedgerIndex

#: The storage's logger, as before this module was split from it: one name for its messages.
log = logging.getLogger("bkframe.plugins.ledger_storage_default.storage")

_INDEX_NAME = re.compile(r"^([0-9a-f]{16})\.idx$")


def load_indexes(index_dir: Path) -> tuple[dict[int, LedgerIndex], bool]:
    """Open every index file in ``index_dir``: the indexes by ledger id, and whether files
    were removed (the directory then needs an fsync). On failure none stays open."""
    indexes: dict[int, LedgerIndex] = {}
    removed = False
    try:
        for name in sorted(os.listdir(index_dir)):
            m = _INDEX_NAME.match(name)
            if not m:
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
            idx = LedgerIndex.open(path)
            if idx.state.ledger_id != ledger_id:
                idx.close()
                raise IndexCorruptError(
                    f"index file {path} holds ledger {idx.state.ledger_id}, but its name says {ledger_id}"
                )
            indexes[ledger_id] = idx
    except BaseException:
        for idx in indexes.values():
            idx.close()
        raise
    return indexes, removed


def lost_entries(
    indexes: dict[int, LedgerIndex], entry_logs: EntryLogManager
) -> Iterator[tuple[int, LedgerIndex, np.ndarray]]:
    """Per ledger, the entry ids whose index records point past the end of their entry log
    (or into a log that is not there): after a power cut the index can be ahead of the
    logs, since index pages reach the disk on their own schedule.

    Those entries are simply not here any more, and the storage drops them: saying so ("no
    such entry", or UNKNOWN in limbo) is true, where a read would only fail. Journal replay
    (next, at boot) re-adds what the journal holds, and BP-46 repair copies back what a
    limbo ledger should hold. The records are dropped in memory; the first checkpoint makes
    the index agree on disk.
    """
    sizes = {log_id: entry_logs.log_size(log_id) for log_id in entry_logs.log_ids()}
    for ledger_id, idx in indexes.items():
        held = np.flatnonzero(idx.records["length"])
        if not held.size:
            continue
        rows = idx.records[held]
        logs, inverse = np.unique(rows["log_id"], return_inverse=True)
        limits = np.array([sizes.get(int(log_id), 0) for log_id in logs.tolist()], dtype=np.uint64)[inverse]
        ends = rows["offset"] + rows["length"].astype(np.uint64)
        lost = held[ends > limits]
        if lost.size:
            log.warning(
                "ledger %d: %d entries (ids %d..%d) point past the end of their entry log (its tail was "
                "lost in a crash); dropped from the index as missing here",
                ledger_id, lost.size, int(lost[0]), int(lost[-1]),
            )
            yield ledger_id, idx, lost
