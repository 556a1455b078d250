"""The state of every ledger the ``default`` storage holds, in one file: ``ledgers.tbl``.

One 128-byte slot per ledger, in the encoding of an index file's header (magic, version,
ledger id, master key, fenced/limbo/write_closed, lac, ledger type, CRC32C); an all-zero
slot is free. The whole table is read once at open, whatever the number of ledgers, so
listing ledgers, the GC's scan and boot protection never open an index file; a state
change is one 128-byte ``pwrite`` (page cache), made durable by the checkpoint's fsync of
the table (:meth:`LedgerTable.sync`). Fences, master keys and explicit LACs are journaled
too, so what a crash takes from the table before a checkpoint, replay puts back.

Slots sit at multiples of 128 bytes, so none straddles a disk sector. A slot freed by a
deletion is not given to another ledger before a checkpoint has made the deletion durable:
a crash can then never leave one ledger in two slots.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bkframe.core.interfaces.ledger_storage import LedgerState

from .ledger_index import HEADER_SIZE, IndexCorruptError, decode_header, encode_header

SLOT_SIZE = HEADER_SIZE
_FREE = bytes(SLOT_SIZE)


class LedgerTable:
    """Every ledger's :class:`LedgerState`, in memory and in one file. Use :meth:`open`.

    :attr:`states` holds the live state objects (the storage hands them out); after
    changing one, :meth:`put` it.
    """

    def __init__(self, path: Path, fd: int, states: dict[int, LedgerState], slots: dict[int, int], end: int) -> None:
        self.path = path
        self._fd = fd
        self.states = states
        self._slots = slots
        #: Slots past the last one in use are taken from here; then the file grows.
        self._end = end
        used = set(slots.values())
        self._free = [s for s in range(end - 1, -1, -1) if s not in used]
        #: Slots freed since the last sync, by the ledger that had them.
        self._freed: dict[int, int] = {}
        #: Whether a write was made since the last sync.
        self.dirty = False

    @classmethod
    def open(cls, path: Path) -> LedgerTable:
        """Read the table at ``path`` (made empty if missing). Raises
        :class:`~.ledger_index.IndexCorruptError` naming the slot of a corrupt state."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            raw = os.pread(fd, size, 0) if size else b""
            if len(raw) != size:
                raise OSError(f"short read of ledger table {path}: {len(raw)} of {size} bytes")
            # A partial last slot is a write the crash cut off while the file grew: that
            # ledger's creation was not checkpointed, and replay makes it again.
            end = size // SLOT_SIZE
            rows = np.frombuffer(raw, dtype=np.uint8, count=end * SLOT_SIZE).reshape(end, SLOT_SIZE)
            states: dict[int, LedgerState] = {}
            slots: dict[int, int] = {}
            for slot in np.flatnonzero(rows.any(axis=1)).tolist():
                at = slot * SLOT_SIZE
                state = decode_header(raw[at : at + SLOT_SIZE], path, f"slot {slot} of ledger table {path}")
                if state.ledger_id in slots:
                    raise IndexCorruptError(
                        f"ledger table {path} holds ledger {state.ledger_id} twice (slots {slots[state.ledger_id]} "
                        f"and {slot}); it is corrupt. Move the bookie's data dir aside and let the cluster "
                        f"re-replicate it"
                    )
                states[state.ledger_id] = state
                slots[state.ledger_id] = slot
            return cls(path, fd, states, slots, end)
        except BaseException:
            os.close(fd)
            raise

    def put(self, state: LedgerState) -> int:
        """Write ``state`` (new or changed) to its slot; return the bytes written."""
        slot = self._slots.get(state.ledger_id)
        if slot is None:
            slot = self._allocate(state.ledger_id)
        self._write(slot, encode_header(state))
        self._slots[state.ledger_id] = slot
        self.states[state.ledger_id] = state
        return SLOT_SIZE

    def _allocate(self, ledger_id: int) -> int:
        slot = self._freed.pop(ledger_id, None)  # made again before the deletion was synced
        if slot is not None:
            return slot
        if self._free:
            return self._free.pop()
        self._end += 1
        return self._end - 1

    def _write(self, slot: int, data: bytes) -> None:
        if os.pwrite(self._fd, data, slot * SLOT_SIZE) != len(data):
            raise OSError(f"short write to slot {slot} of ledger table {self.path} (no space?)")
        self.dirty = True

    def remove(self, ledger_id: int) -> bool:
        """Forget the ledger; False if the table does not hold it."""
        slot = self._slots.pop(ledger_id, None)
        if slot is None:
            return False
        del self.states[ledger_id]
        self._write(slot, _FREE)
        self._freed[ledger_id] = slot
        return True

    def take_freed(self) -> list[int]:
        """Slots freed so far: hand them back with :meth:`release` once a sync made the
        deletions durable."""
        freed = [s for lid, s in self._freed.items() if lid not in self._slots]
        self._freed.clear()
        return freed

    def release(self, slots: list[int]) -> None:
        self._free.extend(slots)

    def sync(self) -> None:
        """fsync the table. Blocking: call from a worker thread."""
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __len__(self) -> int:
        return len(self.states)
