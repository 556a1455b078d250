"""One ledger's index file: its state header and an entry-id-addressed location table.

Layout of ``index/{ledger_id:016x}.idx`` (little endian):

* a 128-byte header: magic, version, ledger id, master-key length and key (64 bytes max),
  fenced/limbo/write_closed flags, lac, ledger type, and a CRC32C of the bytes before it;
* then one 16-byte record per entry id, ``(offset u64, log_id u32, length u32)``, where
  ``offset``/``length`` locate the entry's whole record in entry log ``log_id``. The
  length includes the record header, so it is never 0 for a stored entry and 0 can mean
  "absent" even for an empty entry.

The header is written when the file is made: it names the ledger (checked at every open)
and holds its state as it was then. The state as it is now lives in the storage's ledger
table (:mod:`.ledger_table`); index files of a bkframe that kept it only here are adopted
into the table once, at open.

Updates go through a shared mapping (page cache), to pages allocated first, and the table
is read through the mapping only where this process allocated the pages, else with
``pread`` (see :mod:`bkframe.storage_kit.mapped_file`: on a full disk, a mapped page the filesystem
cannot back is a SIGBUS, and on tmpfs even a read of a hole needs one).
:func:`sync_index_file` makes updates durable from a worker thread at checkpoint, through
an fd of its own (on Linux an fsync writes a file's dirty pages whichever mapping or fd
dirtied them), so an index may be closed (evicted from the storage's cache) while a
checkpoint is under way. A fixed-width table indexed by entry id
lets a whole batch be located and stored with numpy fancy indexing, without a per-entry
Python loop.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import crc32c
import numpy as np
import numpy.typing as npt

from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.errors import BKError
from bkframe.storage_kit.mapped_file import MappedFile

INDEX_MAGIC = b"BKIX"
INDEX_VERSION = 1
MAX_MASTER_KEY = 64
HEADER_SIZE = 128
#: magic, version, ledger id, key length, key, fenced, limbo, write_closed, pad, lac, type.
_HEADER: Final = struct.Struct("<4sIQI64sBBBxqI")  # 100 bytes; the rest up to the CRC is reserved
_CRC_AT: Final = HEADER_SIZE - 4
#: The header and its reserved zeros up to the CRC, packed at once (one call per state change).
_PADDED_HEADER: Final = struct.Struct(_HEADER.format + f"{_CRC_AT - _HEADER.size}x")
_CRC: Final = struct.Struct("<I")
RECORD_DTYPE = np.dtype([("offset", "<u8"), ("log_id", "<u4"), ("length", "<u4")])
_RECORD: Final = struct.Struct("<QII")
#: How far ahead of the records in use :meth:`LedgerIndex.reserve` allocates the table.
RESERVE_AHEAD = 1 << 20
#: Records a scan of the table reads at once (1 MiB): a table may be gigabytes, mostly holes.
SCAN_RECORDS = 1 << 16


class IndexCorruptError(BKError):
    """An index file cannot be trusted; the message names the file and what is wrong."""


def index_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{ledger_id:016x}.idx"


def encode_header(state: LedgerState) -> bytes:
    body = _PADDED_HEADER.pack(
        INDEX_MAGIC,
        INDEX_VERSION,
        state.ledger_id,
        len(state.master_key),
        state.master_key,
        state.fenced,
        state.limbo,
        state.write_closed,
        state.lac,
        state.ledger_type,
    )
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_header(raw: bytes, path: Path, where: str = "") -> LedgerState:
    """The state in a header; ``where`` names it in errors (default: the index file ``path``)."""
    where = where or f"index file {path}"
    if len(raw) < HEADER_SIZE:
        raise IndexCorruptError(f"{where} is truncated: {len(raw)} bytes, header needs {HEADER_SIZE}")
    body, (crc,) = raw[:_CRC_AT], struct.unpack_from("<I", raw, _CRC_AT)
    magic, version, ledger_id, key_len, key, fenced, limbo, write_closed, lac, ledger_type = _HEADER.unpack_from(body)
    if magic != INDEX_MAGIC:
        raise IndexCorruptError(f"{where} has bad magic {magic!r} (expected {INDEX_MAGIC!r})")
    if version != INDEX_VERSION:
        raise IndexCorruptError(f"{where} has version {version}; this bkframe reads version {INDEX_VERSION}")
    if crc32c.crc32c(body) != crc:
        raise IndexCorruptError(f"{where} has a header CRC mismatch; the ledger state in it is corrupt")
    if key_len > MAX_MASTER_KEY:
        raise IndexCorruptError(f"{where} says the master key is {key_len} bytes (max {MAX_MASTER_KEY})")
    return LedgerState(
        ledger_id=ledger_id,
        master_key=bytes(key[:key_len]),
        fenced=bool(fenced),
        limbo=bool(limbo),
        write_closed=bool(write_closed),
        lac=lac,
        ledger_type=ledger_type,
    )


def _allocate(fd: int, size: int) -> None:
    """Grow the file to ``size`` with its blocks allocated now. The table is written through
    the mapping: a page of a sparse file that finds no space on the disk kills the process
    (SIGBUS) when first touched, while an allocation here fails with ENOSPC, which the bookie
    answers by refusing the add and going read-only."""
    current = os.fstat(fd).st_size
    if size > current:
        os.posix_fallocate(fd, current, size - current)


def sync_index_file(path: Path) -> bool:
    """fsync the index file at ``path``; False if it is gone (its ledger was deleted).
    Blocking: call from a worker thread."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


class LedgerIndex:
    """The open index file of one ledger. Use :meth:`create` or :meth:`open`.

    The table is read with :meth:`read`, :meth:`read_one`, :meth:`read_at` and :meth:`held`
    (copies, valid after any await: from the mapping where this process allocated the pages,
    else with ``pread``) and written with :meth:`store`,
    :meth:`clear` and :meth:`repoint`, which write through the mapping only pages that are
    allocated (:meth:`reserve` allocates ahead of an add, so that a full disk fails it
    before its entries are appended to an entry log).
    """

    def __init__(self, path: Path, fd: int, state: LedgerState, *, allocated: int = 0) -> None:
        self.path = path
        self.state = state
        #: The fd stays the same for the file's life (growth only remaps), so a checkpoint
        #: thread may fsync it while the event loop grows the index.
        self.fd = fd
        self._file = MappedFile(fd, allocated=allocated)
        #: The table in the mapping: written and read only where allocated (MappedFile.covers).
        self._table = self._map_table()
        #: Entry ids the table has slots for (it grows by doubling).
        self.capacity = int(self._table.shape[0])
        #: Found by scanning the table when first asked (see :attr:`last_entry_id`).
        self._last_entry_id: int | None = None

    def _map_table(self) -> npt.NDArray[np.void]:
        mm = np.frombuffer(self._file.mapping, dtype=np.uint8)
        usable = (mm.shape[0] - HEADER_SIZE) // RECORD_DTYPE.itemsize * RECORD_DTYPE.itemsize
        return mm[HEADER_SIZE : HEADER_SIZE + usable].view(RECORD_DTYPE)

    @property
    def last_entry_id(self) -> int:
        """The highest entry id stored, -1 if none. An index is opened far more often than
        this is asked (an add to an evicted index reopens it), so the table is scanned only
        when it is: from its end, a chunk at a time."""
        if self._last_entry_id is None:
            self._last_entry_id = -1
            stop = self.capacity
            while stop > 0:
                first = max(0, stop - SCAN_RECORDS)
                nonzero = np.flatnonzero(self.read(first, stop)["length"])
                if nonzero.size:
                    self._last_entry_id = first + int(nonzero[-1])
                    break
                stop = first
        return self._last_entry_id

    def stored_up_to(self, entry_id: int) -> None:
        """``entry_id`` was just stored: raise the last entry id to it if it is known (an
        unknown one is found from the table, which holds this entry already)."""
        if self._last_entry_id is not None and entry_id > self._last_entry_id:
            self._last_entry_id = entry_id

    @classmethod
    def create(cls, path: Path, state: LedgerState, capacity: int, *, spare: Path | None = None) -> LedgerIndex:
        """Make the index file at ``path`` (which must not exist), all of it allocated.
        ``spare``: a file made beforehand, zero-filled and allocated (:mod:`.spare_index_files`),
        renamed into place instead of creating and allocating one here -- both can wait on a
        busy disk."""
        if spare is not None:
            os.rename(spare, path)
            try:
                fd = os.open(path, os.O_RDWR)
            except BaseException:
                # Not left in place with no header: the caller may make the file anew.
                path.unlink(missing_ok=True)
                raise
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            # The header goes in before the file is sized, so that a kernel write-back
            # never shows a sized file with no header to a bookie restarting after a crash
            # (an all-zero header is still tolerated by the storage as "never created").
            header = encode_header(state)
            if os.pwrite(fd, header, 0) != len(header):
                raise OSError(errno.ENOSPC, f"short write of the header of index file {path}")
            size = HEADER_SIZE + capacity * RECORD_DTYPE.itemsize
            _allocate(fd, size)
            idx = cls(path, fd, state, allocated=size)
            idx._last_entry_id = -1
            return idx
        except BaseException:
            os.close(fd)
            # Half made (e.g. no space for it): a header without a table would stop the next start.
            path.unlink(missing_ok=True)
            raise

    @classmethod
    def open(cls, path: Path) -> LedgerIndex:
        """Open an existing index file. Nothing of it counts as allocated: an earlier run may
        have grown it sparse, so each page is allocated again before it is written."""
        fd = os.open(path, os.O_RDWR)
        try:
            raw = os.pread(fd, HEADER_SIZE, 0)
            state = decode_header(raw, path)
            if os.fstat(fd).st_size < HEADER_SIZE + RECORD_DTYPE.itemsize:
                raise IndexCorruptError(f"index file {path} has a header but no entry table")
            return cls(path, fd, state)
        except BaseException:
            os.close(fd)
            raise

    def ensure_capacity(self, max_entry_id: int) -> None:
        """Grow (by doubling) until ``max_entry_id`` has a slot; remaps the file.

        The growth is sparse (``ftruncate``): only the records actually stored get disk
        blocks, through :meth:`reserve`. Allocating the whole doubled table instead would
        let one add with a huge entry id take gigabytes of disk."""
        capacity = self.capacity
        if max_entry_id < capacity:
            return
        while capacity <= max_entry_id:
            capacity *= 2
        self._file.grow(HEADER_SIZE + capacity * RECORD_DTYPE.itemsize)
        self._table = self._map_table()
        self.capacity = capacity

    def reserve(self, first: int, last: int) -> None:
        """Allocate disk blocks for the records of entry ids ``first..last`` (within capacity),
        and up to RESERVE_AHEAD bytes of table after them, so that sequential ids pay one call
        per MiB of table. On a full disk this raises ``OSError`` (ENOSPC) that the add can
        report, where a write to an unallocated page of the mapping would kill the bookie."""
        at = HEADER_SIZE + first * RECORD_DTYPE.itemsize
        self._file.allocate(at, HEADER_SIZE + (last + 1) * RECORD_DTYPE.itemsize, ahead=RESERVE_AHEAD)

    # -- reading: the mapping only where allocated, else pread ---------------------------

    def read(self, first: int, stop: int, step: int = 1) -> npt.NDArray[np.void]:
        """The records of entry ids ``first, first + step, ...`` below ``stop`` (and the
        capacity): a copy, from the mapping where this process allocated those pages, else
        read from the file."""
        stop = min(stop, self.capacity)
        if first < 0 or first >= stop:
            return np.empty(0, dtype=RECORD_DTYPE)
        last = first + (stop - 1 - first) // step * step
        size = RECORD_DTYPE.itemsize
        if self._file.covers(HEADER_SIZE + first * size, HEADER_SIZE + (last + 1) * size):
            return self._table[first : last + 1 : step].copy()
        raw = self._file.pread(HEADER_SIZE + first * size, (last - first + 1) * size)
        rows = np.frombuffer(raw, dtype=RECORD_DTYPE, count=len(raw) // size)
        return rows[::step] if step > 1 else rows

    def read_one(self, entry_id: int) -> tuple[int, int, int]:
        """``(offset, log_id, length)`` of ``entry_id``; zeros if it has no record."""
        if not 0 <= entry_id < self.capacity:
            return 0, 0, 0
        at = HEADER_SIZE + entry_id * RECORD_DTYPE.itemsize
        if self._file.covers(at, at + RECORD_DTYPE.itemsize):
            # A tailing reader's entry, just added: no system call.
            offset, log_id, length = self._table[entry_id].item()
            return offset, log_id, length
        raw = os.pread(self.fd, RECORD_DTYPE.itemsize, at)
        return _RECORD.unpack(raw) if len(raw) == _RECORD.size else (0, 0, 0)

    def read_at(self, entry_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
        """The records of ``entry_ids`` (ascending, within capacity): one read per run of ids
        less than SCAN_RECORDS apart."""
        out = np.zeros(len(entry_ids), dtype=RECORD_DTYPE)
        if not len(entry_ids):
            return out
        breaks = np.flatnonzero(np.diff(entry_ids) >= SCAN_RECORDS) + 1
        for a, b in zip([0, *breaks.tolist()], [*breaks.tolist(), len(entry_ids)]):
            lo = int(entry_ids[a])
            rows = self.read(lo, int(entry_ids[b - 1]) + 1)
            out[a:b] = rows[entry_ids[a:b] - lo]
        return out

    def held(self, first: int = 0, stop: int | None = None) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.void]]]:
        """``(entry_ids, records)`` of the entries stored from ``first`` up to ``stop`` (all
        by default), ascending, SCAN_RECORDS of the table at a time."""
        stop = self.capacity if stop is None else min(stop, self.capacity)
        for at in range(max(first, 0), stop, SCAN_RECORDS):
            rows = self.read(at, min(stop, at + SCAN_RECORDS))
            ids = np.flatnonzero(rows["length"])
            if ids.size == len(rows):
                yield ids + at, rows
            elif ids.size:
                yield ids + at, rows[ids]

    def held_ids(self, first: int = 0, stop: int | None = None) -> npt.NDArray[np.int64]:
        """The ids of :meth:`held`, without their records."""
        stop = self.capacity if stop is None else min(stop, self.capacity)
        found = [
            np.flatnonzero(self.read(at, min(stop, at + SCAN_RECORDS))["length"]) + at
            for at in range(max(first, 0), stop, SCAN_RECORDS)
        ]
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    # -- writing: through the mapping, allocated pages only ------------------------------

    def store(self, entry_ids: Sequence[int], records: npt.NDArray[np.void], first: int, last: int) -> None:
        """Write ``records`` for ``entry_ids``, which lie in ``first..last`` (a later repeat
        of an id wins). The caller reserved them (else this allocates now, and may raise
        ENOSPC before writing anything)."""
        self.reserve(first, last)
        self._table[np.asarray(entry_ids, dtype=np.int64)] = records

    def store_one(self, entry_id: int, offset: int, log_id: int, length: int) -> None:
        """:meth:`store` for one entry, without numpy's per-call cost of arrays: packed into
        the mapping the table views."""
        self.reserve(entry_id, entry_id)
        if not 0 <= entry_id < self.capacity:
            raise IndexError(f"entry {entry_id} is outside the index's {self.capacity} slots")
        _RECORD.pack_into(self._file.mapping, HEADER_SIZE + entry_id * _RECORD.size, offset, log_id, length)

    def _allocate_records(self, entry_ids: npt.NDArray[np.int64]) -> None:
        """Allocate the pages of the records of ``entry_ids`` (ascending) -- already there
        for records that hold an entry, but that is the filesystem's to say."""
        at = HEADER_SIZE + entry_ids * RECORD_DTYPE.itemsize
        self._file.allocate_pages(at.tolist())

    def clear(self, entry_ids: npt.NDArray[np.int64]) -> None:
        """Forget the entries ``entry_ids`` (ascending): their bytes are gone."""
        self._allocate_records(entry_ids)
        self._table[entry_ids] = np.zeros(len(entry_ids), dtype=RECORD_DTYPE)
        if self._last_entry_id is not None and self._last_entry_id in set(entry_ids.tolist()):
            self._last_entry_id = None  # found again from the table when asked

    def repoint(self, entry_ids: npt.NDArray[np.int64], offsets: npt.NDArray[np.uint64], log_id: int) -> None:
        """The entries ``entry_ids`` (ascending) now live at ``offsets`` of log ``log_id``."""
        self._allocate_records(entry_ids)
        self._table["offset"][entry_ids] = offsets
        self._table["log_id"][entry_ids] = log_id

    def sync(self) -> None:
        """msync the mapping and fsync the file. Blocking: call from a worker thread."""
        self._file.flush()
        os.fsync(self.fd)

    def close(self) -> None:
        # The mapping is unmapped once no array points into it any more: dropped, never
        # closed under it.
        self._table = np.empty(0, dtype=RECORD_DTYPE)
        self.capacity = 0
        del self._file
        os.close(self.fd)
        self.fd = -1
