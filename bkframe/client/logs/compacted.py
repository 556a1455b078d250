"""A compacted segment's ledger: the records kept, then an index of their positions.

Compaction (docs/compaction.md) rewrites a segment that loses records as a new ledger of
the records kept, byte for byte and in position order, and after them the *index*: the kept
records' entry ids in the segment (their positions), as ``uint32`` deltas compressed with
zlib, cut into entries of at most :data:`INDEX_PIECE` bytes (a segment of millions of
entries must not make one oversized entry). A reader reads the index once per ledger and
maps a range of positions to a range of ledger entries with two binary searches; the
entries it reads then carry their positions again, so everything after the read (log
entries, Arrow batches, offload) sees the segment's own entry ids, with gaps.
"""

from __future__ import annotations

import zlib

import attrs
import numpy as np
import numpy.typing as npt

from bkframe.client.read_handle import EntryBlock, ReadHandle
from bkframe.errors import BKError

#: The first bytes of an index (its format's version).
INDEX_MAGIC = b"BKX1"
#: The largest index entry.
INDEX_PIECE = 1 << 20

I64 = npt.NDArray[np.int64]


def encode_index(entry_ids: I64) -> list[bytes]:
    """The index entries of the kept ``entry_ids`` (ascending)."""
    ids = np.asarray(entry_ids, dtype=np.int64)
    if len(ids) and (ids[0] < 0 or bool(np.any(np.diff(ids) <= 0))):
        raise ValueError("kept entry ids must be ascending and not negative")
    deltas = np.diff(ids, prepend=np.int64(-1)).astype("<u4")
    data = INDEX_MAGIC + len(ids).to_bytes(8, "little") + zlib.compress(deltas.tobytes(), 6)
    return [data[at : at + INDEX_PIECE] for at in range(0, len(data), INDEX_PIECE)]


def decode_index(pieces: list[bytes], ledger_id: int) -> I64:
    """The kept entry ids from the index entries; :class:`BKError` if they do not parse."""
    data = b"".join(pieces)
    if not data.startswith(INDEX_MAGIC) or len(data) < 12:
        raise BKError(f"compacted ledger {ledger_id}: its index does not start with {INDEX_MAGIC!r}")
    count = int.from_bytes(data[4:12], "little")
    try:
        raw = zlib.decompress(data[12:])
    except zlib.error as e:
        raise BKError(f"compacted ledger {ledger_id}: its index does not decompress: {e}") from None
    if len(raw) != 4 * count:
        raise BKError(f"compacted ledger {ledger_id}: its index holds {len(raw) // 4} ids, its header says {count}")
    return np.cumsum(np.frombuffer(raw, dtype="<u4").astype(np.int64)) - 1


async def read_index(handle: ReadHandle, kept: int, index_entries: int) -> I64:
    """The kept entry ids of the compacted ledger ``handle`` reads (``kept`` records, then
    ``index_entries`` index entries)."""
    if index_entries <= 0:
        raise BKError(f"compacted ledger {handle.ledger_id} has no index entries")
    block = await handle.read_block(kept, kept + index_entries - 1)
    ids = decode_index(block.payloads(), handle.ledger_id)
    if len(ids) != kept:
        raise BKError(f"compacted ledger {handle.ledger_id}: its index lists {len(ids)} records, not {kept}")
    return ids


def empty_block(ledger_id: int) -> EntryBlock:
    none = np.empty(0, dtype=np.int64)
    return EntryBlock(ledger_id, none, b"", none, none)


async def read_positions(handle: ReadHandle, ids: I64, first: int, last: int) -> EntryBlock:
    """The kept records at positions ``first..last`` (entry ids of the segment, inclusive),
    their ``entry_ids`` being those positions."""
    lo = int(np.searchsorted(ids, first, "left"))
    hi = int(np.searchsorted(ids, last, "right"))
    if lo >= hi:
        return empty_block(handle.ledger_id)
    block = await handle.read_block(lo, hi - 1)
    return attrs.evolve(block, entry_ids=ids[block.entry_ids])
