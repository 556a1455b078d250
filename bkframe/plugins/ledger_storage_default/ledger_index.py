"""One ledger's index file: its state header and an entry-id-addressed location table.

Layout of ``index/{ledger_id:016x}.idx`` (little endian), mapped with ``numpy.memmap``:

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

Updates go to the mapping (page cache) only; :func:`sync_index_file` makes them durable
from a worker thread at checkpoint, through an fd of its own (on Linux an fsync writes a
file's dirty pages whichever mapping or fd dirtied them), so an index may be closed (evicted
from the storage's cache) while a checkpoint is under way. A fixed-width table indexed by entry id
lets a whole batch be located and stored with numpy fancy indexing, without a per-entry
Python loop.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from pathlib import Path

import crc32c
import numpy as np
import numpy.typing as npt

from bkframe.core.interfaces import LedgerState
from bkframe.errors import BKError

INDEX_MAGIC = b"BKIX"
INDEX_VERSION = 1
MAX_MASTER_KEY = 64
HEADER_SIZE = 128
#: magic, version, ledger id, key length, key, fenced, limbo, write_closed, pad, lac, type.
_HEADER = struct.Struct("<4sIQI64sBBBxqI")  # 100 bytes; the rest up to the CRC is reserved
_CRC_AT = HEADER_SIZE - 4
RECORD_DTYPE = np.dtype([("offset", "<u8"), ("log_id", "<u4"), ("length", "<u4")])
#: How far ahead of the records in use :meth:`LedgerIndex.reserve` allocates the table.
RESERVE_AHEAD = 1 << 20


class IndexCorruptError(BKError):
    """An index file cannot be trusted; the message names the file and what is wrong."""


def index_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{ledger_id:016x}.idx"


def encode_header(state: LedgerState) -> bytes:
    body = _HEADER.pack(
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
    ).ljust(_CRC_AT, b"\0")
    return body + struct.pack("<I", crc32c.crc32c(body))


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
    """The open index file of one ledger. Use :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, fd: int, state: LedgerState) -> None:
        self.path = path
        self.state = state
        #: The fd stays the same for the file's life (growth only remaps), so a checkpoint
        #: thread may fsync it while the event loop grows the index.
        self.fd = fd
        self._mmap: mmap.mmap = self._map_file()
        self._mm: npt.NDArray[np.uint8] = np.frombuffer(self._mmap, dtype=np.uint8)
        self.records: npt.NDArray[np.void] = self._records()
        #: Bytes from the start of the file known to be allocated on disk (see :meth:`reserve`).
        self._reserved_to = HEADER_SIZE
        #: Found by scanning the table when first asked (see :attr:`last_entry_id`).
        self._last_entry_id: int | None = None

    @property
    def last_entry_id(self) -> int:
        """The highest entry id stored, -1 if none. An index is opened far more often than
        this is asked (an add to an evicted index reopens it), so the table is scanned only
        when it is."""
        if self._last_entry_id is None:
            nonzero = np.flatnonzero(self.records["length"])
            self._last_entry_id = int(nonzero[-1]) if nonzero.size else -1
        return self._last_entry_id

    @last_entry_id.setter
    def last_entry_id(self, value: int) -> None:
        self._last_entry_id = value

    def stored_up_to(self, entry_id: int) -> None:
        """``entry_id`` was just stored: raise the last entry id to it if it is known (an
        unknown one is found from the table, which holds this entry already)."""
        if self._last_entry_id is not None and entry_id > self._last_entry_id:
            self._last_entry_id = entry_id

    @classmethod
    def create(cls, path: Path, state: LedgerState, capacity: int, *, spare: Path | None = None) -> LedgerIndex:
        """Make the index file at ``path`` (which must not exist). ``spare``: a file made
        beforehand, zero-filled and allocated (:mod:`.spare_index_files`), renamed into place
        instead of creating and allocating one here -- both can wait on a busy disk."""
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
            _allocate(fd, HEADER_SIZE + capacity * RECORD_DTYPE.itemsize)
            idx = cls(path, fd, state)
            idx._last_entry_id = -1
            return idx
        except BaseException:
            os.close(fd)
            # Half made (e.g. no space for it): a header without a table would stop the next start.
            path.unlink(missing_ok=True)
            raise

    @classmethod
    def open(cls, path: Path) -> LedgerIndex:
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

    def _map_file(self) -> mmap.mmap:
        # mmap over our own fd (numpy.memmap would open the path again, at ten times the cost,
        # which an index cache that opens indexes all the time pays for).
        return mmap.mmap(self.fd, os.fstat(self.fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def _records(self) -> npt.NDArray[np.void]:
        usable = (self._mm.shape[0] - HEADER_SIZE) // RECORD_DTYPE.itemsize * RECORD_DTYPE.itemsize
        return self._mm[HEADER_SIZE : HEADER_SIZE + usable].view(RECORD_DTYPE)

    @property
    def capacity(self) -> int:
        return int(self.records.shape[0])

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
        os.ftruncate(self.fd, HEADER_SIZE + capacity * RECORD_DTYPE.itemsize)
        # The old mapping is dropped, not closed: a checkpoint thread may still be
        # msyncing it, and its dirty pages belong to the file's page cache either way.
        self._mmap = self._map_file()
        self._mm = np.frombuffer(self._mmap, dtype=np.uint8)
        self.records = self._records()

    def reserve(self, first: int, last: int) -> None:
        """Allocate disk blocks for the records of entry ids ``first..last`` (within capacity).

        The table is a sparse file written through a mapping: storing a record into a hole
        makes the kernel allocate a block at the page fault, and on a full disk that is a
        SIGBUS, which kills the bookie. ``posix_fallocate`` first turns that into an
        ``OSError`` (ENOSPC) that the add can report. Sequential ids pay one call per MiB
        of table.
        """
        start = HEADER_SIZE + first * RECORD_DTYPE.itemsize
        end = HEADER_SIZE + (last + 1) * RECORD_DTYPE.itemsize
        if end <= self._reserved_to:
            return
        if start <= self._reserved_to:
            size = self._mm.shape[0]
            target = min(size, max(end, self._reserved_to + RESERVE_AHEAD))
            os.posix_fallocate(self.fd, self._reserved_to, target - self._reserved_to)
            self._reserved_to = target
        else:  # far beyond the allocated prefix (ids out of order): just those records
            os.posix_fallocate(self.fd, start, end - start)

    def write_state(self) -> int:
        """Store ``self.state`` in the mapped header; return the bytes written."""
        self._mm[:HEADER_SIZE] = np.frombuffer(encode_header(self.state), dtype=np.uint8)
        return HEADER_SIZE

    def sync(self) -> None:
        """msync the mapping and fsync the file. Blocking: call from a worker thread."""
        mm = self._mmap  # a concurrent grow swaps self._mmap; flush the one we read
        mm.flush()
        os.fsync(self.fd)

    def close(self) -> None:
        # The mapping is unmapped once no array points into it any more (a caller may still
        # hold one of ``records``): dropped, never closed under it.
        self.records = np.empty(0, dtype=RECORD_DTYPE)
        del self._mm, self._mmap
        os.close(self.fd)
        self.fd = -1
