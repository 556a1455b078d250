"""The ``default`` ledger storage: interleaved entry logs, one mmap'd index per ledger, and
one table of every ledger's state.

Add path (seed: bookkeeper-overview, "Add Entry"): a batch of one ledger becomes ONE
append to the entry-log manager, and its locations are stored in the ledger's index with
one numpy fancy assignment. Nothing is fsynced there: the journal covers the batch until
:meth:`DefaultLedgerStorage.checkpoint` ("Data Flush") makes logs, then indexes, durable.

Each entry is stored in the log as a self-describing record (:mod:`.entry_record`). Ledger
states (key, fence, limbo, LAC...) live in :mod:`.ledger_table`, so that listing ledgers and
reading their state open no index; indexes are opened as needed through a bounded cache
(:mod:`.index_cache`) and checked against the logs as they open (:mod:`.startup`); the
space of deleted ledgers is reclaimed by :mod:`.compaction`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise, repeat
from pathlib import Path

import crc32c
import numpy as np
import numpy.typing as npt
import trio

from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.errors import BKError
from bkframe.storage_kit import fsync
from bkframe.storage_kit.fsync import fsync_dir
from bkframe.storage_kit.open_files import OutOfFilesError, is_out_of_files

from .compaction import Compactor
from .config import (
    DEFAULT_COMPACTION_THRESHOLD,
    DEFAULT_INDEX_INITIAL_ENTRIES,
    DEFAULT_MAX_OPEN_INDEXES,
    DEFAULT_SPARES,
)
from .entry_record import ENTRY_RECORD, RECORD_HEADER_BYTES, RECORD_HEADER_DTYPE, read_record
from .index_cache import IndexCache
from .ledger_index import (
    HEADER_SIZE,
    MAX_MASTER_KEY,
    RECORD_DTYPE,
    SCAN_RECORDS,
    IndexCorruptError,
    LedgerIndex,
    index_path,
    sync_index_file,
)
from .ledger_table import LedgerTable
from .spare_index_files import SpareIndexFiles
from .startup import adopt_orphans, log, lost_records

TABLE_FILE = "ledgers.tbl"
#: Entry ids index a dense table, so a huge id would mean a huge (sparse) index file;
#: BookKeeper ids count up from 0, and 2**31 entries is far beyond any real ledger.
MAX_ENTRY_ID = (1 << 31) - 1
#: A checkpoint fsyncs up to this many dirty index files one by one; more, and it syncs
#: their filesystem at once.
SYNC_ONE_BY_ONE_UP_TO = 256
#: A range read reads the bytes between two wanted records up to this gap (see get_entries).
SPAN_GAP = 16 * 1024
#: ...and reads at most this much at once.
SPAN_BYTES = 4 << 20
#: A range read reads this many index records first, then four times more each time.
FIRST_READ_RECORDS = 256


class StorageCorruptError(BKError):
    """Stored data does not match what the index says; the message says where."""


class StorageSyncError(BKError):
    """An fsync of the indexes failed: no checkpoint can complete until a restart."""


class DefaultLedgerStorage:
    """Entries in the shared entry logs, located through per-ledger index files.

    :param directory: the storage's own directory: the ledger table ``ledgers.tbl`` and the
        index files in ``directory/index``.
    :param entry_logs: where entry records are appended; this storage closes it in
        :meth:`aclose` (the bookie closes only the storage).
    :param counters: ``storage_bytes_written`` (index and state bytes) and
        ``storage_fsyncs`` (index, table and directory fsyncs) are counted here; the
        entry-log manager counts its own.
    :param index_initial_entries: entry slots a new index file starts with; it doubles
        as needed.
    :param max_open_indexes: indexes kept open at once (two file descriptors each); the
        least recently used is closed to open another.
    :param spare_index_files: index files :meth:`run` keeps made ahead of need for new
        ledgers (:mod:`.spare_index_files`); 0 makes each on the event loop.
    """

    def __init__(
        self,
        directory: Path,
        entry_logs: EntryLogManager,
        counters: Counters,
        *,
        index_initial_entries: int = DEFAULT_INDEX_INITIAL_ENTRIES,
        compaction_threshold: float = DEFAULT_COMPACTION_THRESHOLD,
        large_entry_bytes: int = 0,
        max_open_indexes: int = DEFAULT_MAX_OPEN_INDEXES,
        spare_index_files: int = DEFAULT_SPARES,
    ) -> None:
        if index_initial_entries < 1:
            raise ValueError("index_initial_entries must be at least 1")
        if not 0 <= compaction_threshold <= 1:
            raise ValueError("compaction_threshold must be from 0 to 1")
        #: Write-once threshold for PD entries (:class:`bkframe.core.interfaces.ledger_storage.WriteOnceStorage`).
        self.large_entry_bytes = large_entry_bytes
        self._dir = Path(directory)
        self._index_dir = self._dir / "index"
        self._entry_logs = entry_logs
        self._counters = counters
        self._initial_entries = index_initial_entries
        #: Ledgers whose index changed since the last checkpoint.
        self._dirty: set[int] = set()
        #: Index or table files were created or removed: the directories need an fsync.
        self._dir_dirty = not self._index_dir.exists() or not (self._dir / TABLE_FILE).exists()
        #: Ledgers whose index was checked against the entry logs in this run (a record
        #: written since always lies within its log: one check per run is enough).
        self._checked: set[int] = set()
        #: Why an index fsync failed, once one did (see :meth:`checkpoint`).
        self._sync_failure: str | None = None
        self._lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        self._index_dir.mkdir(parents=True, exist_ok=True)
        self._table = LedgerTable.open(self._dir / TABLE_FILE)
        try:
            self._dir_dirty = adopt_orphans(self._index_dir, self._table) or self._dir_dirty
        except BaseException:
            self._table.close()
            raise
        self._indexes = IndexCache(max_open_indexes, self._open_index)
        self._spares = SpareIndexFiles(self._dir, HEADER_SIZE + index_initial_entries * RECORD_DTYPE.itemsize, spare_index_files)
        self._compactor = Compactor(
            self.ledgers,
            self._indexes.get,
            entry_logs,
            counters,
            threshold=compaction_threshold,
            checkpoint=self.checkpoint,
            drop=self._drop,
            repointed=self._mark_dirty,
        )

    def _open_index(self, ledger_id: int, create: bool) -> LedgerIndex | None:
        """Open the ledger's index file (for :class:`.index_cache.IndexCache`): checked
        against the entry logs first; made if missing and ``create``."""
        path = index_path(self._index_dir, ledger_id)
        try:
            idx = LedgerIndex.open(path)
        except FileNotFoundError:
            idx = None
        except IndexCorruptError:
            with open(path, "rb") as f:
                if any(f.read(HEADER_SIZE)):
                    raise
            # Made after the last checkpoint and never written back, while its table slot
            # was: the journal still holds what it held (see startup.adopt_orphans).
            log.warning("index file %s was never written (crash before a checkpoint); making it again", path)
            path.unlink()
            idx = None
        if idx is None:
            if not create:
                return None
            state = self._table.states[ledger_id]
            spare = self._spares.take()
            try:
                idx = LedgerIndex.create(path, state, self._initial_entries, spare=spare)
            except OSError:
                if spare is None:
                    raise
                # Whatever went wrong with the spare, the plain way says what is wrong, if anything.
                idx = LedgerIndex.create(path, state, self._initial_entries)
            self._dirty.add(ledger_id)
            self._checked.add(ledger_id)  # made now: nothing in it to check against the logs
            self._dir_dirty = True
            self._counters.storage_bytes_written += HEADER_SIZE
            return idx
        if idx.state.ledger_id != ledger_id:
            idx.close()
            raise IndexCorruptError(f"index file {path} holds ledger {idx.state.ledger_id}, but its name says {ledger_id}")
        if ledger_id not in self._checked:
            lost = lost_records(idx, self._entry_logs)
            if lost.size:
                self._drop(ledger_id, idx, lost)
            self._checked.add(ledger_id)
        return idx

    def _mark_dirty(self, ledger_id: int) -> None:
        """The ledger's index changed: the next checkpoint fsyncs it."""
        self._dirty.add(ledger_id)

    def _drop(self, ledger_id: int, idx: LedgerIndex, entry_ids: np.ndarray) -> None:
        """Forget entries whose bytes are gone (see :func:`.startup.lost_records`)."""
        idx.clear(entry_ids)
        self._dirty.add(ledger_id)
        self._counters.storage_entries_dropped += len(entry_ids)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Background work (:class:`bkframe.core.interfaces.ledger_storage.BackgroundStorage`): keep spare
        index files made, so that a new ledger's first add makes none on the event loop."""
        await self._spares.run(task_status=task_status)

    @property
    def spare_index_files(self) -> SpareIndexFiles:
        """The pool of index files made ahead of need (for metrics and tests)."""
        return self._spares

    @property
    def open_indexes(self) -> IndexCache:
        """The cache of open indexes (its size and limit, for metrics and tests)."""
        return self._indexes

    # -- ledger state ----------------------------------------------------------------------

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        # The live object: callers read it (and see later fences/LACs); they must change
        # it only through this storage so that the change reaches the ledger table.
        return self._table.states.get(ledger_id)

    def ensure_ledger(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerState:
        if len(master_key) > MAX_MASTER_KEY:
            raise ValueError(f"ledger {ledger_id}: master key is {len(master_key)} bytes; at most {MAX_MASTER_KEY}")
        state = self._table.states.get(ledger_id)
        if state is None:
            return self._create(ledger_id, master_key, ledger_type)
        if master_key and not state.master_key:
            # Known so far only from replayed entries or a keyless fence: adopt the key.
            state.master_key = bytes(master_key)
            state.ledger_type = ledger_type
            self._state_changed(state)
        return state

    def _create(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerState:
        """A new ledger, in the table only: its index file is made with its first entry."""
        state = LedgerState(ledger_id=ledger_id, master_key=bytes(master_key), ledger_type=ledger_type)
        self._counters.storage_bytes_written += self._table.put(state)
        return state

    def _state(self, ledger_id: int) -> LedgerState:
        state = self._table.states.get(ledger_id)
        if state is None:
            raise KeyError(f"ledger {ledger_id} is not in this storage; call ensure_ledger first")
        return state

    def _index(self, ledger_id: int) -> LedgerIndex:
        """The ledger's index, made if it has none yet (the ledger must exist)."""
        if ledger_id not in self._table.states:
            self._create(ledger_id, b"", 0)
        idx = self._indexes.get(ledger_id, create=True)
        assert idx is not None
        return idx

    def _state_changed(self, state: LedgerState) -> None:
        self._counters.storage_bytes_written += self._table.put(state)

    def set_fenced(self, ledger_id: int) -> bool:
        state = self._state(ledger_id)
        if state.fenced:
            return False
        state.fenced = True
        self._state_changed(state)
        return True

    def set_lac(self, ledger_id: int, lac: int) -> None:
        state = self._state(ledger_id)
        if lac > state.lac:
            state.lac = lac
            self._state_changed(state)

    def set_limbo(self, ledger_id: int, limbo: bool) -> None:
        """BP-46 limbo, set with the fence at boot and cleared after repair; kept in the ledger table."""
        state = self._state(ledger_id)
        if state.limbo != limbo:
            state.limbo = limbo
            self._state_changed(state)

    def set_write_closed(self, ledger_id: int) -> None:
        """The advisory write close of BP-32, kept in the ledger table across restarts."""
        state = self._state(ledger_id)
        if not state.write_closed:
            state.write_closed = True
            self._state_changed(state)
        self._entry_logs.write_close(ledger_id)

    def ledgers(self) -> list[int]:
        return sorted(self._table.states)

    def delete_ledger(self, ledger_id: int) -> None:
        if not self._table.remove(ledger_id):
            return
        self._indexes.discard(ledger_id)
        self._dirty.discard(ledger_id)
        self._checked.discard(ledger_id)
        index_path(self._index_dir, ledger_id).unlink(missing_ok=True)
        self._dir_dirty = True

    # -- entries ---------------------------------------------------------------------------

    def add_entries(self, ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer]) -> int:
        n = len(entry_ids)
        if n != len(entries):
            raise ValueError(f"ledger {ledger_id}: {n} entry ids but {len(entries)} entries")
        if n == 0:
            return 0
        lo, hi = min(entry_ids), max(entry_ids)
        if lo < 0 or hi > MAX_ENTRY_ID:
            raise ValueError(f"ledger {ledger_id}: entry ids must be in 0..{MAX_ENTRY_ID}, got {lo}..{hi}")
        # A ledger not known yet: entries replayed from the journal for a ledger whose
        # master record is in an earlier, trimmed journal file would otherwise be dropped;
        # they are kept keyless.
        idx = self._index(ledger_id)
        # Index room first: whatever fails (a full disk) fails before the append, so the
        # log never holds bytes of a batch the index does not know.
        idx.ensure_capacity(hi)
        idx.reserve(lo, hi)
        # Hot path: map() keeps the per-entry work in C; one join, one append.
        lens = list(map(len, entries))
        parts: list[Buffer] = [b""] * (2 * n)
        parts[0::2] = map(ENTRY_RECORD.pack, lens, repeat(ledger_id), entry_ids)
        parts[1::2] = entries
        blob = b"".join(parts)
        log_id, base = self._entry_logs.append(ledger_id, blob)

        if n == 1:
            # One entry (a writer with one append in flight): numpy's per-call overhead
            # would cost more than the whole record.
            idx.store_one(lo, base, log_id, len(blob))
        else:
            rec_lens = np.array(lens, dtype=np.int64) + ENTRY_RECORD.size
            batch = np.empty(n, dtype=RECORD_DTYPE)
            batch["offset"] = np.cumsum(rec_lens) - rec_lens + base
            batch["log_id"] = log_id
            batch["length"] = rec_lens
            # With a repeated id in one batch the later entry wins, as it does in the log.
            idx.store(entry_ids, batch, lo, hi)
        idx.stored_up_to(hi)
        self._dirty.add(ledger_id)
        self._counters.storage_bytes_written += n * RECORD_DTYPE.itemsize
        return len(blob)

    # -- large entries written once (WriteOnceStorage) -------------------------------------

    def locate(self, ledger_id: int, entry_id: int) -> tuple[int, int, int]:
        offset, log_id, length = self._index(ledger_id).read_one(entry_id)
        return log_id, offset, length

    async def sync_entries(self) -> None:
        # The entry-log manager's flush covers every append made before it was called and
        # callers queue on its lock, so one fsync serves all the adds waiting for it.
        await self._entry_logs.flush()

    def index_stored(self, ledger_id: int, entry_id: int, log_id: int, offset: int, length: int, crc: int) -> bool:
        if not 0 <= entry_id <= MAX_ENTRY_ID:
            return False
        record = read_record(self._entry_logs, log_id, offset, length, ledger_id, entry_id)
        # A record torn by the crash (never acknowledged: its log was not fsynced) or a log
        # id reused since: the header or the CRC says so, and it is not indexed.
        if not isinstance(record, bytes) or crc32c.crc32c(memoryview(record)[ENTRY_RECORD.size :]) != crc:
            return False
        idx = self._index(ledger_id)
        idx.ensure_capacity(entry_id)
        idx.reserve(entry_id, entry_id)
        idx.store_one(entry_id, offset, log_id, length)
        idx.stored_up_to(entry_id)
        self._dirty.add(ledger_id)
        return True

    def _existing(self, ledger_id: int) -> LedgerIndex | None:
        """The ledger's index if it has one (nothing made)."""
        if ledger_id not in self._table.states:
            return None
        return self._indexes.get(ledger_id)

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        idx = self._existing(ledger_id)
        if idx is None or not 0 <= entry_id < idx.capacity:
            return None
        offset, log_id, length = idx.read_one(entry_id)
        if length == 0:
            return None
        raw = self._entry_logs.read(log_id, offset, length)
        data_len, rec_ledger, rec_entry = ENTRY_RECORD.unpack_from(raw)
        if (rec_ledger, rec_entry, data_len + ENTRY_RECORD.size) != (ledger_id, entry_id, length):
            raise StorageCorruptError(
                f"index {idx.path} says entry {ledger_id}:{entry_id} is {length} bytes at offset {offset} "
                f"of entry log {log_id:08x}, but the record there is entry {rec_ledger}:{rec_entry} "
                f"with {data_len} data bytes"
            )
        return raw[ENTRY_RECORD.size :]

    def get_entries(
        self, ledger_id: int, first: int, last: int, step: int, max_bytes: int
    ) -> tuple[npt.NDArray[np.int64], list[memoryview]]:
        """See :class:`~bkframe.core.interfaces.ledger_storage.RangeReadStorage`. A batch's records lie
        one after another in an entry log (``add_entries`` appends them with one write),
        so each span of nearby records is one read, its record headers checked as an
        array: 0.4 us per 1 KiB entry against 2.5 for a ``get_entry`` each."""
        idx = self._existing(ledger_id)
        none: tuple[npt.NDArray[np.int64], list[memoryview]] = (np.empty(0, dtype=np.int64), [])
        if idx is None or not 0 <= first < idx.capacity or last < first or step < 1:
            return none
        records = self._range_records(idx, first, last, step, max_bytes)
        lengths = records["length"].astype(np.int64)
        held = np.flatnonzero(lengths == 0)
        n = int(held[0]) if held.size else len(lengths)
        if n == 0:
            return none
        # About max_bytes, as READ_BATCH asks: the first entry always.
        sizes = np.cumsum(lengths[:n] - ENTRY_RECORD.size)
        n = max(1, int(np.searchsorted(sizes, max_bytes, side="right")))
        offsets = records["offset"][:n].astype(np.int64)
        log_ids = records["log_id"][:n]
        lengths = lengths[:n]
        ids = first + step * np.arange(n, dtype=np.int64)
        # Spans read at once: records in one log, each after the one before and at most
        # SPAN_GAP bytes past its end. A striped ledger's reader asks for every E-th entry,
        # which lie a record or two apart: reading the ones between costs less than a read each.
        gaps = offsets[1:] - (offsets[:-1] + lengths[:-1])
        breaks = np.flatnonzero((gaps < 0) | (gaps > SPAN_GAP) | (log_ids[1:] != log_ids[:-1])) + 1
        parts: list[memoryview] = []
        for a, b in self._spans(offsets, lengths, [0, *breaks.tolist(), n]):
            at = int(offsets[a])
            try:
                raw = self._entry_logs.read(int(log_ids[a]), at, int(offsets[b - 1] + lengths[b - 1]) - at)
            except Exception:  # noqa: BLE001 - the entry read alone (get_entry) says what is wrong
                break
            rel = offsets[a:b] - at
            heads = np.frombuffer(raw, dtype=np.uint8)[rel[:, None] + RECORD_HEADER_BYTES]
            heads = heads.view(RECORD_HEADER_DTYPE).reshape(b - a)
            good = (heads["length"] + ENTRY_RECORD.size == lengths[a:b]) & (heads["ledger_id"] == ledger_id)
            good &= heads["entry_id"] == ids[a:b]
            wrong = np.flatnonzero(~good)
            k = int(wrong[0]) if wrong.size else b - a
            view = memoryview(raw)
            starts, ends = (rel[:k] + ENTRY_RECORD.size).tolist(), (rel[:k] + lengths[a : a + k]).tolist()
            parts.extend([view[s:e] for s, e in zip(starts, ends)])
            if k < b - a:
                break
        return ids[: len(parts)], parts

    @staticmethod
    def _range_records(idx: LedgerIndex, first: int, last: int, step: int, max_bytes: int) -> npt.NDArray[np.void]:
        """The records of ``first, first + step, ...`` up to ``last``, read a chunk at a time
        (growing) until one is absent or their entries pass ``max_bytes``: a range may
        reach far beyond what one answer carries."""
        stop = min(last, idx.capacity - 1) + 1
        parts = []
        want = FIRST_READ_RECORDS
        total = 0
        while first < stop:
            rows = idx.read(first, min(stop, first + want * step), step)
            parts.append(rows)
            lengths = rows["length"]
            if not lengths.all():
                break
            total += int(lengths.sum(dtype=np.int64)) - ENTRY_RECORD.size * len(rows)
            if total > max_bytes:
                break
            first += len(rows) * step
            want = min(4 * want, SCAN_RECORDS)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    @staticmethod
    def _spans(offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], bounds: list[int]) -> list[tuple[int, int]]:
        """The runs between ``bounds`` cut further so that none reads more than SPAN_BYTES
        (at least one record each): many small records with gaps between could otherwise
        make one read far larger than the answer."""
        out = []
        for a, b in pairwise(bounds):
            while a < b:
                fit = np.searchsorted(offsets[a:b] + lengths[a:b] - offsets[a], SPAN_BYTES, side="right")
                c = a + max(1, int(fit))
                out.append((a, c))
                a = c
        return out

    def held_entries(self, ledger_id: int, first: int, last: int) -> list[int]:
        idx = self._existing(ledger_id)
        first = max(first, 0)
        if idx is None or last < first:
            return []
        return idx.held_ids(first, last + 1).tolist()

    def last_entry_id(self, ledger_id: int) -> int:
        idx = self._existing(ledger_id)
        return idx.last_entry_id if idx is not None else -1

    # -- durability ------------------------------------------------------------------------

    async def checkpoint(self) -> None:
        async with self._lock:
            if self._sync_failure is not None:
                raise StorageSyncError(self._sync_failure)
            # Logs first: once an index is durable, everything it points to must be too.
            await self._entry_logs.flush()
            # Swapped, not copied: with 10^5 ledgers written since the last checkpoint,
            # sorting them and making their paths held the event loop for 340 ms (the
            # worker thread does it below).
            dirty, self._dirty = self._dirty, set()
            table_dirty, self._table.dirty = self._table.dirty, False
            freed = self._table.take_freed()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                n = await trio.to_thread.run_sync(self._sync, dirty, table_dirty, dir_dirty, limiter=self._limiter)
            except OSError as e:
                self._dirty.update(i for i in dirty if i in self._table.states)
                self._table.dirty = self._table.dirty or table_dirty
                self._dir_dirty = self._dir_dirty or dir_dirty
                if is_out_of_files(e):
                    # No fsync was made or failed: nothing is lost, the next checkpoint
                    # tries again (the journal keeps everything until one succeeds).
                    raise OutOfFilesError(e.errno, f"checkpoint of {self._dir} postponed: {e}") from e
                # As for entry logs: after a failed fsync the kernel may have dropped the
                # dirty pages, and a retry would "succeed" without writing them. No later
                # checkpoint may claim the indexes durable; the journal keeps what they hold.
                self._sync_failure = (
                    f"an fsync of the ledger indexes in {self._index_dir} failed ({e}); their changes since the "
                    f"last checkpoint may be lost, so no checkpoint can complete any more. Restart the bookie: "
                    f"it replays the journal from its last good checkpoint"
                )
                raise StorageSyncError(self._sync_failure) from e
            except BaseException:
                self._dirty.update(i for i in dirty if i in self._table.states)
                self._table.dirty = self._table.dirty or table_dirty
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            self._table.release(freed)
            self._counters.storage_fsyncs += n

    async def collect_garbage(self) -> int:
        """Reclaim the entry-log space of deleted ledgers; return the bytes freed (see
        :meth:`.compaction.Compactor.collect_garbage`)."""
        return await self._compactor.collect_garbage()

    def _sync(self, dirty: set[int], table_dirty: bool, dir_dirty: bool) -> int:
        """In a worker thread: fsync the index files of the ``dirty`` ledgers (by path: an
        evicted index has no fd; in id order, as they were made), the table, and the
        directories."""
        if len(dirty) > SYNC_ONE_BY_ONE_UP_TO:
            # One syncfs(2) of the filesystem (fsync.sync_tree): an fsync per file is a
            # journal commit per file -- ~10 s per 30,000 files here, with every other
            # metadata change on the disk (an index made, a table slot written on the event
            # loop) waiting behind those commits.
            n = fsync.sync_tree(self._index_dir)
        else:
            n = sum(sync_index_file(index_path(self._index_dir, i)) for i in sorted(dirty))
        if table_dirty:
            self._table.sync()
            n += 1
        if dir_dirty:
            # The storage dir too: the index dir itself, or the table, may be new.
            for d in (self._index_dir, self._dir):
                fsync_dir(d)
            n += 2
        return n

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.checkpoint()
        self._closed = True
        self._indexes.close_all()
        self._table.close()
        await self._entry_logs.aclose()

    def __repr__(self) -> str:
        return f"DefaultLedgerStorage({str(self._dir)!r}, ledgers={len(self._table)}, open={len(self._indexes)})"
