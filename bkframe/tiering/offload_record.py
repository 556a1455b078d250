"""Where an offloaded segment's object is: what a log's metadata records of it.

A closed segment, once copied to a tier as a verified Parquet object
(:mod:`bkframe.tiering`), carries an :class:`Offload`: the tier's URI (as the tier
shows it: never a credential; the reader opens it again with its own environment's), the
object's key, size and CRC32C, the segment's entry count and entry checksum (what the
object was verified against), when it was recorded, and whether the segment's ledger is
still on the bookies. It is stored as one more element at the end of the segment's JSON
list (:meth:`bkframe.client.logs.model.Segment.to_json`), only on offloaded segments: a
record without offloads is byte for byte what it was before, and an older bkframe reads
one with them (it ignores the extra element).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs


@attrs.frozen
class Offload:
    """An offloaded segment's object."""

    tier: str
    key: str
    size: int
    entries: int
    #: The segment's entry checksum (CRC32C chained over every entry: object_format.py).
    checksum: int
    #: CRC32C of the object's bytes as put.
    object_crc32c: int
    offloaded_at: float
    #: The segment's ledger is still on the bookies (reads fall back to it; deleting it
    #: after the log's ``offload_deletion_lag_s`` clears this).
    on_bookies: bool = True
    #: CRC32C of the object's footer (from its start to the object's end), checked by a
    #: reader before it parses the footer: a damaged footer can abort the process inside
    #: pyarrow's Parquet reader. 0: not recorded (an object recorded before it was).
    footer_crc32c: int = 0

    def to_json(self) -> list[Any]:
        return [
            self.tier, self.key, self.size, self.entries, self.checksum, self.object_crc32c, self.offloaded_at,
            int(self.on_bookies), self.footer_crc32c,
        ]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Offload:
        tier, key, size, entries, checksum, object_crc, at, on_bookies = raw[:8]
        footer_crc = int(raw[8]) if len(raw) > 8 else 0
        return cls(str(tier), str(key), int(size), int(entries), int(checksum), int(object_crc), float(at),
                   bool(on_bookies), footer_crc)


@attrs.frozen
class OffloadStats:
    """How much of a log is offloaded (``log info``): segments, entries and bytes (the
    segments' bytes on the bookies, and the objects'), and to which tiers."""

    segments: int = 0
    entries: int = 0
    #: The offloaded segments' length as the ledgers store it.
    length: int = 0
    object_bytes: int = 0
    tiers: tuple[str, ...] = ()
    #: Of the offloaded segments, those whose ledger is still on the bookies.
    on_bookies: int = 0

    @classmethod
    def of(cls, offloads: Iterable[tuple[int, int, Offload]]) -> OffloadStats:
        """From ``(entries, length, offload)`` of each offloaded segment."""
        segments = entries = length = size = kept = 0
        tiers: list[str] = []
        for n, nbytes, o in offloads:
            segments += 1
            entries += n
            length += nbytes
            size += o.size
            kept += o.on_bookies
            if o.tier not in tiers:
                tiers.append(o.tier)
        return cls(segments, entries, length, size, tuple(tiers), kept)
