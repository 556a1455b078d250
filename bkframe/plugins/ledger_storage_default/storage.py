"""The ``default`` ledger storage: interleaved entry logs plus one mmap'd index per ledger.

Add path (seed: bookkeeper-overview, "Add Entry"): a batch of one ledger becomes ONE
append to the entry-log manager, and its locations are stored in the ledger's index with
one numpy fancy assignment. Nothing is fsynced there: the journal covers the batch until
:meth:`DefaultLedgerStorage.checkpoint` ("Data Flush") makes logs, then indexes, durable.

Each entry is stored in the log as a self-describing record (:mod:`.entry_record`). The
indexes are loaded, and checked against the logs, by :mod:`.startup`; the space of deleted
ledgers is reclaimed by :mod:`.compaction`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from pathlib import Path

import crc32c
import numpy as np
import trio

from bkframe.core.counters import Counters
from bkframe.core.fsync import fsync_dir
from bkframe.core.interfaces import Buffer, EntryLogManager, LedgerState
from bkframe.errors import BKError

from .compaction import DEFAULT_COMPACTION_THRESHOLD, Compactor
from .entry_record import ENTRY_RECORD, read_record
from .ledger_index import HEADER_SIZE, MAX_MASTER_KEY, RECORD_DTYPE, LedgerIndex, index_path
from .startup import load_indexes, lost_entries

DEFAULT_INDEX_INITIAL_ENTRIES = 1024
#: Entry ids index a dense table, so a huge id would mean a huge (sparse) index file;
#: BookKeeper ids count up from 0, and 2**31 entries is far beyond any real ledger.
MAX_ENTRY_ID = (1 << 31) - 1


class StorageCorruptError(BKError):
    """Stored data does not match what the index says; the message says where."""


class StorageSyncError(BKError):
    """An fsync of the indexes failed: no checkpoint can complete until a restart."""


class DefaultLedgerStorage:
    """Entries in the shared entry logs, located through per-ledger index files.

    :param directory: the storage's own directory; index files go in ``directory/index``.
    :param entry_logs: where entry records are appended; this storage closes it in
        :meth:`aclose` (the bookie closes only the storage).
    :param counters: ``storage_bytes_written`` (index and state bytes) and
        ``storage_fsyncs`` (index and directory fsyncs) are counted here; the entry-log
        manager counts its own.
    :param index_initial_entries: entry slots a new index file starts with; it doubles
        as needed.
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
    ) -> None:
        if index_initial_entries < 1:
            raise ValueError("index_initial_entries must be at least 1")
        if not 0 <= compaction_threshold <= 1:
            raise ValueError("compaction_threshold must be from 0 to 1")
        #: Write-once threshold for PD entries (:class:`bkframe.core.interfaces.WriteOnceStorage`).
        self.large_entry_bytes = large_entry_bytes
        self._dir = Path(directory)
        self._index_dir = self._dir / "index"
        self._entry_logs = entry_logs
        self._counters = counters
        self._initial_entries = index_initial_entries
        #: Ledgers whose index or state changed since the last checkpoint.
        self._dirty: set[int] = set()
        #: Index files were created or removed: the directory needs an fsync.
        self._dir_dirty = not self._index_dir.exists()
        #: Indexes deleted while a checkpoint thread may be syncing them; closed after it,
        #: so the thread never fsyncs a closed (or reused) fd.
        self._graveyard: list[LedgerIndex] = []
        self._checkpointing = False
        #: Why an index fsync failed, once one did (see :meth:`checkpoint`).
        self._sync_failure: str | None = None
        self._lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        self._index_dir.mkdir(parents=True, exist_ok=True)
        self._indexes, removed = load_indexes(self._index_dir)
        self._dir_dirty = self._dir_dirty or removed
        try:
            for ledger_id, idx, lost in lost_entries(self._indexes, entry_logs):
                self._drop(ledger_id, idx, lost)
        except BaseException:
            for idx in self._indexes.values():
                idx.close()
            raise
        self._compactor = Compactor(
            self._indexes,
            entry_logs,
            counters,
            threshold=compaction_threshold,
            checkpoint=self.checkpoint,
            drop=self._drop,
            repointed=self._dirty.add,
        )

    def _drop(self, ledger_id: int, idx: LedgerIndex, entry_ids: np.ndarray) -> None:
        """Forget entries whose bytes are gone (see :func:`.startup.lost_entries`)."""
        idx.records[entry_ids] = np.zeros(len(entry_ids), dtype=RECORD_DTYPE)
        if idx.last_entry_id in entry_ids:
            nonzero = np.flatnonzero(idx.records["length"][: idx.last_entry_id + 1])
            idx.last_entry_id = int(nonzero[-1]) if nonzero.size else -1
        self._dirty.add(ledger_id)
        self._counters.storage_entries_dropped += len(entry_ids)

    # -- ledger state ----------------------------------------------------------------------

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        # The live object: callers read it (and see later fences/LACs); they must change
        # it only through this storage so that the change reaches the index header.
        idx = self._indexes.get(ledger_id)
        return idx.state if idx is not None else None

    def ensure_ledger(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerState:
        if len(master_key) > MAX_MASTER_KEY:
            raise ValueError(f"ledger {ledger_id}: master key is {len(master_key)} bytes; at most {MAX_MASTER_KEY}")
        idx = self._indexes.get(ledger_id)
        if idx is None:
            return self._create(ledger_id, master_key, ledger_type).state
        if master_key and not idx.state.master_key:
            # Known so far only from replayed entries or a keyless fence: adopt the key.
            idx.state.master_key = bytes(master_key)
            idx.state.ledger_type = ledger_type
            self._state_changed(ledger_id, idx)
        return idx.state

    def _create(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerIndex:
        state = LedgerState(ledger_id=ledger_id, master_key=bytes(master_key), ledger_type=ledger_type)
        idx = LedgerIndex.create(index_path(self._index_dir, ledger_id), state, self._initial_entries)
        self._indexes[ledger_id] = idx
        self._dirty.add(ledger_id)
        self._dir_dirty = True
        self._counters.storage_bytes_written += HEADER_SIZE
        return idx

    def _index(self, ledger_id: int) -> LedgerIndex:
        idx = self._indexes.get(ledger_id)
        if idx is None:
            raise KeyError(f"ledger {ledger_id} is not in this storage; call ensure_ledger first")
        return idx

    def _state_changed(self, ledger_id: int, idx: LedgerIndex) -> None:
        self._counters.storage_bytes_written += idx.write_state()
        self._dirty.add(ledger_id)

    def set_fenced(self, ledger_id: int) -> bool:
        idx = self._index(ledger_id)
        if idx.state.fenced:
            return False
        idx.state.fenced = True
        self._state_changed(ledger_id, idx)
        return True

    def set_lac(self, ledger_id: int, lac: int) -> None:
        idx = self._index(ledger_id)
        if lac > idx.state.lac:
            idx.state.lac = lac
            self._state_changed(ledger_id, idx)

    def set_limbo(self, ledger_id: int, limbo: bool) -> None:
        """BP-46 limbo, set with the fence at boot and cleared after repair; kept in the index header."""
        idx = self._index(ledger_id)
        if idx.state.limbo != limbo:
            idx.state.limbo = limbo
            self._state_changed(ledger_id, idx)

    def set_write_closed(self, ledger_id: int) -> None:
        """The advisory write close of BP-32, kept in the index header across restarts."""
        idx = self._index(ledger_id)
        if not idx.state.write_closed:
            idx.state.write_closed = True
            self._state_changed(ledger_id, idx)
        self._entry_logs.write_close(ledger_id)

    def ledgers(self) -> list[int]:
        return sorted(self._indexes)

    def delete_ledger(self, ledger_id: int) -> None:
        idx = self._indexes.pop(ledger_id, None)
        if idx is None:
            return
        self._dirty.discard(ledger_id)
        idx.path.unlink()
        self._dir_dirty = True
        if self._checkpointing:
            self._graveyard.append(idx)
        else:
            idx.close()

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
        idx = self._indexes.get(ledger_id)
        if idx is None:
            # Entries replayed from the journal for a ledger whose master record is in an
            # earlier, trimmed journal file would otherwise be dropped; keep them keyless.
            idx = self._create(ledger_id, b"", 0)
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
            idx.records[lo] = (base, log_id, len(blob))
        else:
            rec_lens = np.array(lens, dtype=np.int64) + ENTRY_RECORD.size
            batch = np.empty(n, dtype=RECORD_DTYPE)
            batch["offset"] = np.cumsum(rec_lens) - rec_lens + base
            batch["log_id"] = log_id
            batch["length"] = rec_lens
            # With a repeated id in one batch the later entry wins, as it does in the log.
            idx.records[np.asarray(entry_ids, dtype=np.int64)] = batch
        if hi > idx.last_entry_id:
            idx.last_entry_id = hi
        self._dirty.add(ledger_id)
        self._counters.storage_bytes_written += n * RECORD_DTYPE.itemsize
        return len(blob)

    # -- large entries written once (WriteOnceStorage) -------------------------------------

    def locate(self, ledger_id: int, entry_id: int) -> tuple[int, int, int]:
        offset, log_id, length = self._index(ledger_id).records[entry_id].item()
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
        idx = self._indexes.get(ledger_id) or self._create(ledger_id, b"", 0)
        idx.ensure_capacity(entry_id)
        idx.reserve(entry_id, entry_id)
        idx.records[entry_id] = (offset, log_id, length)
        idx.last_entry_id = max(idx.last_entry_id, entry_id)
        self._dirty.add(ledger_id)
        return True

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        idx = self._indexes.get(ledger_id)
        if idx is None or not 0 <= entry_id < idx.capacity:
            return None
        offset, log_id, length = idx.records[entry_id].item()
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

    def held_entries(self, ledger_id: int, first: int, last: int) -> list[int]:
        idx = self._indexes.get(ledger_id)
        first = max(first, 0)
        if idx is None or last < first:
            return []
        lengths = idx.records["length"][first : min(last, idx.capacity - 1) + 1]
        return (np.flatnonzero(lengths) + first).tolist()

    def last_entry_id(self, ledger_id: int) -> int:
        idx = self._indexes.get(ledger_id)
        return idx.last_entry_id if idx is not None else -1

    # -- durability ------------------------------------------------------------------------

    async def checkpoint(self) -> None:
        async with self._lock:
            if self._sync_failure is not None:
                raise StorageSyncError(self._sync_failure)
            # Logs first: once an index is durable, everything it points to must be too.
            await self._entry_logs.flush()
            dirty = sorted(self._dirty)
            self._dirty.clear()
            targets = [self._indexes[i] for i in dirty]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            self._checkpointing = True
            try:
                n = await trio.to_thread.run_sync(self._sync, targets, dir_dirty, limiter=self._limiter)
            except OSError as e:
                # As for entry logs: after a failed fsync the kernel may have dropped the
                # dirty pages, and a retry would "succeed" without writing them. No later
                # checkpoint may claim the indexes durable; the journal keeps what they hold.
                self._dirty.update(i for i in dirty if i in self._indexes)
                self._sync_failure = (
                    f"an fsync of the ledger indexes in {self._index_dir} failed ({e}); their changes since the "
                    f"last checkpoint may be lost, so no checkpoint can complete any more. Restart the bookie: "
                    f"it replays the journal from its last good checkpoint"
                )
                raise StorageSyncError(self._sync_failure) from e
            except BaseException:
                self._dirty.update(i for i in dirty if i in self._indexes)
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            finally:
                self._checkpointing = False
                for idx in self._graveyard:
                    idx.close()
                self._graveyard.clear()
            self._counters.storage_fsyncs += n

    async def collect_garbage(self) -> int:
        """Reclaim the entry-log space of deleted ledgers; return the bytes freed (see
        :meth:`.compaction.Compactor.collect_garbage`)."""
        return await self._compactor.collect_garbage()

    def _sync(self, targets: list[LedgerIndex], dir_dirty: bool) -> int:
        for idx in targets:
            idx.sync()
        if dir_dirty:
            # The storage dir too: the index dir itself may be new.
            for d in (self._index_dir, self._dir):
                fsync_dir(d)
        return len(targets) + (2 if dir_dirty else 0)

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.checkpoint()
        self._closed = True
        for idx in self._indexes.values():
            idx.close()
        self._indexes.clear()
        await self._entry_logs.aclose()

    def __repr__(self) -> str:
        return f"DefaultLedgerStorage({str(self._dir)!r}, ledgers={len(self._indexes)})"
