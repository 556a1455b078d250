"""Several journal directories, each with its own writer (BookKeeper's ``journalDirectories``).

A record goes to journal ``key % N`` (the bookie passes the ledger id as the key), so all
of a ledger's records are in one journal, in order. Each journal is an
:class:`~bkframe_journal_fs.fs_journal.FsJournal` with its own group commit and fsync
thread: N fsyncs can be in flight at once (on N disks, N times the bandwidth).

**One sequence.** :meth:`MultiJournal.append` returns a sequence over all journals;
``wait_durable(seq)`` returns once every record up to ``seq`` is durable in every journal
(the contract of :class:`~bkframe.core.interfaces.journal.Journal`), so what the bookie waits for
(a PD add, a SYNC, a fence) is covered whichever journal holds it. The journals fsync in
parallel, so waiting on several costs the slowest, not the sum.

**File ids order files across directories.** All journals draw new file ids from one
counter, started past every file in every directory: a file id is unique across the
directories and later files have larger ids. Replay merges the journals by file id, so a
ledger whose records moved to another journal (the number of directories changed between
runs) still replays in order.

**The mark.** :meth:`position` is the largest position of any journal holding records in
its current file; every other journal whose current file is older is rolled to a new file
(created when it is first written), so every record appended after the mark lands after
it: in the mark's file past its offset, or in a file with a larger id. Replay from a mark
reads exactly that; ``remove_files_before`` drops every file with a smaller id.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import trio

from bkframe.core.counters import Counters
from bkframe.core.errors import BKError
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import JournalPosition, JournalWriteError
from bkframe.storage_kit.fsync import write_durably
from bkframe_journal_fs.config import FsJournalConfig
from bkframe_journal_fs.file_format import FILE_HEADER, journal_file_ids
from bkframe_journal_fs.fs_journal import FsJournal

#: In the first directory: the other directories this journal used, to refuse a start
#: that would leave one of them (and the records in it) out of replay.
DIRS_FILE = "journal_dirs.json"


class JournalDirsChangedError(BKError):
    """A directory that held journal files is not configured any more."""


def check_dirs(first: Path, others: Sequence[Path]) -> None:
    """Refuse to start if a directory used before still holds journal files but is not in
    ``others`` any more (its records would not be replayed); then record ``others``."""
    path = first / DIRS_FILE
    try:
        before = [Path(d) for d in json.loads(path.read_text())]
    except FileNotFoundError:
        before = []
    for d in before:
        if d not in others and any(d.glob("*.txn")):
            raise JournalDirsChangedError(
                f"journal directory {d} holds journal files but is no longer in [journal] dirs: its records "
                f"would not be replayed. Add it back; or, if the bookie was stopped cleanly (its final "
                f"checkpoint covers them), delete its .txn files"
            )
    if not others and not before:
        return  # one directory, as always: nothing to record
    first.mkdir(parents=True, exist_ok=True)
    write_durably(path, json.dumps([str(d) for d in others]).encode())


class MultiJournal:
    """A :class:`~bkframe.core.interfaces.journal.Journal` over several directories; see the module
    docstring. ``config`` is every directory's journal's (its ``dirs`` are ``directories``)."""

    def __init__(self, directories: Sequence[Path], counters: Counters, config: FsJournalConfig | None = None) -> None:
        dirs = [Path(d) for d in directories]
        last = 0
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            last = max([last, *journal_file_ids(d)])
        # itertools.count: one atomic step, safe from the worker threads too (a journal
        # that could not create a file asks for the next id there).
        ids = itertools.count(last + 1)
        self.directory = dirs[0]
        self._journals = [FsJournal(d, counters, config, new_file_id=ids.__next__) for d in dirs]
        self._seq = 0
        #: Per journal, its records not yet settled: (sequence, its own sequence), in order.
        self._pending: list[deque[tuple[int, int]]] = [deque() for _ in dirs]
        #: Sequences of records lost to writes that found no space: sorted [first, last] ranges.
        self._lost: list[list[int]] = []

    @property
    def journals(self) -> list[FsJournal]:
        return list(self._journals)

    def append(self, parts: Sequence[Buffer], key: int = 0) -> int:
        i = key % len(self._journals)
        own = self._journals[i].append(parts)
        self._seq += 1
        self._pending[i].append((self._seq, own))
        return self._seq

    def _settle(self) -> None:
        """Drop the records each journal has settled; remember the lost ones."""
        for journal, pending in zip(self._journals, self._pending):
            durable = journal.durable_seq
            while pending and pending[0][1] <= durable:
                seq, own = pending.popleft()
                if journal.is_lost(own):
                    self._add_lost(seq)

    def _add_lost(self, seq: int) -> None:
        lost = self._lost
        i = bisect.bisect_left(lost, [seq, seq])
        lost.insert(i, [seq, seq])
        # Merge with touching neighbours (lost records are rare: a full disk).
        if i + 1 < len(lost) and lost[i + 1][0] <= seq + 1:
            lost[i][1] = lost[i + 1][1]
            del lost[i + 1]
        if i > 0 and lost[i - 1][1] >= seq - 1:
            lost[i - 1][1] = lost[i][1]
            del lost[i]

    @property
    def durable_seq(self) -> int:
        self._settle()
        heads = [pending[0][0] for pending in self._pending if pending]
        return min(heads) - 1 if heads else self._seq

    def is_lost(self, seq: int) -> bool:
        self._settle()
        i = bisect.bisect_right(self._lost, seq, key=lambda r: r[0]) - 1
        return i >= 0 and self._lost[i][1] >= seq

    @staticmethod
    def _last_own_upto(pending: deque[tuple[int, int]], seq: int) -> int:
        """The own sequence of the journal's last pending record at or before ``seq`` (0: none)."""
        if not pending or pending[0][0] > seq:
            return 0
        if pending[-1][0] <= seq:
            return pending[-1][1]
        return pending[bisect.bisect_right(pending, seq, key=lambda r: r[0]) - 1][1]

    async def wait_durable(self, seq: int, *, hurry: bool = True) -> None:
        waits = [(j, self._last_own_upto(p, seq)) for j, p in zip(self._journals, self._pending)]
        waits = [(j, own) for j, own in waits if own]
        if hurry:
            # Every journal first, so that their group commits run at the same time.
            for journal, own in waits:
                journal.hurry(own)
        for journal, own in waits:
            try:
                await journal.wait_durable(own, hurry=False)
            except JournalWriteError:
                pass  # that record is settled as lost; whether ``seq`` is, is asked below
        if self.is_lost(seq):
            raise JournalWriteError(None, f"journal record {seq} was not written (no space in its directory)")

    def position(self) -> JournalPosition:
        positions = [j.position() for j in self._journals]
        holding = [p for p in positions if p.offset > FILE_HEADER.size]
        mark = max(holding) if holding else max(positions)
        for journal, p in zip(self._journals, positions):
            if p.file_id < mark.file_id:
                journal.roll()  # its next records must land after the mark
        return mark

    def remove_files_before(self, mark: JournalPosition) -> int:
        return sum(j.remove_files_before(mark) for j in self._journals)

    def replay(self, since: JournalPosition | None) -> Iterator[tuple[JournalPosition, bytes]]:
        # File ids are unique across the directories: only one holds the mark's file.
        replays = [j.replay(since) for j in self._journals]
        yield from heapq.merge(*replays, key=lambda item: item[0].file_id)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for journal in self._journals:
                await nursery.start(journal.run)
            task_status.started()

    async def aclose(self) -> None:
        async with trio.open_nursery() as nursery:
            for journal in self._journals:
                nursery.start_soon(journal.aclose)
