"""A log read as a table: the latest record of each key (docs/compaction.md, "Reading the
table").

Two passes over one snapshot of the log (the same segment ranges, so the same ledgers: a
compaction swapping segments meanwhile leaves the replaced ledgers for its retirement lag).
The first indexes each keyed record's key and position
(:class:`~bkframe.compaction.key_index.KeyIndex`, bounded memory); the second keeps a record
if it has no key, or if it is its key's latest and not a tombstone (an empty payload). The
records come out in position order, with their positions.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import numpy as np
import numpy.typing as npt

from bkframe.client.logs.model import LogEntry
from bkframe.compaction.key_index import KeyIndex

if TYPE_CHECKING:
    import pyarrow as pa

U64 = npt.NDArray[np.uint64]
#: The key index's memory budget for a table read.
TABLE_MEMORY = 64 << 20


def pack(segments: npt.NDArray[np.int64] | int, entry_ids: npt.NDArray[np.int64]) -> U64:
    """Positions packed into one ascending integer each: ``segment << 32 | entry``."""
    return ((np.asarray(segments, dtype=np.uint64) << np.uint64(32)) | np.asarray(entry_ids, dtype=np.uint64)).astype(
        np.uint64
    )


class KeptPositions:
    """The ascending stream of positions to keep (:meth:`KeyIndex.latest`), asked about in
    ascending batches. Blocking (it may read the index's files): call it in a thread."""

    def __init__(self, chunks: Iterator[U64]) -> None:
        self._chunks = chunks
        self._buffer: U64 = np.empty(0, dtype=np.uint64)
        self._done = False

    def mask(self, positions: U64) -> npt.NDArray[np.bool_]:
        """Which of ``positions`` (ascending, after every one asked before) are kept."""
        if len(positions) == 0:
            return np.zeros(0, dtype=bool)
        top = positions[-1]
        while not self._done and (len(self._buffer) == 0 or self._buffer[-1] < top):
            found = next(self._chunks, None)
            if found is None:
                self._done = True
            else:
                self._buffer = np.concatenate([self._buffer, found])
        at = np.searchsorted(self._buffer, positions)
        inside = at < len(self._buffer)
        kept = np.zeros(len(positions), dtype=bool)
        kept[inside] = self._buffer[at[inside]] == positions[inside]
        self._buffer = self._buffer[np.searchsorted(self._buffer, top, "right") :]
        return kept


class LatestIndex:
    """Pass 1's index and pass 2's filter over one snapshot, in a directory of its own."""

    def __init__(self, memory_bytes: int = TABLE_MEMORY, work_dir: Path | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="bkframe-table-", dir=work_dir)
        self.index = KeyIndex(Path(self._tmp.name), memory_bytes=memory_bytes)
        self._kept: KeptPositions | None = None

    async def add_entries(self, entries: list[LogEntry]) -> None:
        keyed = [e for e in entries if e.key is not None]
        if keyed:
            keys = [e.key for e in keyed if e.key is not None]
            positions = pack(
                np.array([e.position.segment for e in keyed]), np.array([e.position.entry_id for e in keyed])
            )
            await anyio.to_thread.run_sync(self.index.add, keys, positions)

    async def kept(self, positions: U64) -> npt.NDArray[np.bool_]:
        if self._kept is None:
            self._kept = KeptPositions(await anyio.to_thread.run_sync(self.index.latest))
        return await anyio.to_thread.run_sync(self._kept.mask, positions)

    async def filter_entries(self, entries: list[LogEntry]) -> list[LogEntry]:
        """The entries pass 2 keeps: keyless ones, and keys' latest that are not tombstones."""
        positions = pack(
            np.array([e.position.segment for e in entries], dtype=np.int64),
            np.array([e.position.entry_id for e in entries], dtype=np.int64),
        )
        latest = await self.kept(positions)
        return [e for e, last in zip(entries, latest.tolist()) if e.key is None or (last and e.payload)]

    def close(self) -> None:
        self.index.close()
        self._tmp.cleanup()


async def latest_entries(
    read: Callable[[], AsyncIterator[list[LogEntry]]], *, memory_bytes: int = TABLE_MEMORY
) -> AsyncIterator[list[LogEntry]]:
    """The table of the chunks ``read()`` gives (twice: it must read the same snapshot each
    time), a chunk at a time."""
    table = LatestIndex(memory_bytes)
    try:
        async for chunk in read():
            await table.add_entries(chunk)
        async for chunk in read():
            kept = await table.filter_entries(chunk)
            if kept:
                yield kept
    finally:
        await anyio.to_thread.run_sync(table.close)


async def latest_batches(
    read: Callable[[], AsyncIterator[pa.RecordBatch]], *, memory_bytes: int = TABLE_MEMORY
) -> AsyncIterator[pa.RecordBatch]:
    """:func:`latest_entries` of Arrow batches (the columns of
    :mod:`bkframe.client.logs.columns`), filtered as whole columns."""
    import pyarrow.compute as pc

    table = LatestIndex(memory_bytes)
    try:
        async for batch in read():
            keyed = batch.filter(pc.is_valid(batch.column("key")))
            if keyed.num_rows:
                keys = keyed.column("key").to_pylist()
                positions = pack(keyed.column("segment").to_numpy(), keyed.column("entry_id").to_numpy())
                await anyio.to_thread.run_sync(table.index.add, keys, positions)
        async for batch in read():
            positions = pack(batch.column("segment").to_numpy(), batch.column("entry_id").to_numpy())
            latest = await table.kept(positions)
            keep = pc.or_(
                pc.is_null(batch.column("key")),
                pc.and_(latest, pc.greater(pc.binary_length(batch.column("payload")), 0)),
            )
            kept = batch.filter(keep)
            if kept.num_rows:
                yield kept
    finally:
        await anyio.to_thread.run_sync(table.close)
