"""A read partition of the data source: an entry range of one ledger, and where to read it.

Spark pickles each partition to the task that reads it. A range of a log segment on the
bookies is read through the ledger's read handle (:mod:`bkframe_spark.reading`); a range of
an offloaded segment names its object and is read from the tier
(:mod:`bkframe_spark.tier_reading`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class EntryRange(InputPartition):
    """One read partition: entries ``first..last`` of one ledger (a log segment or not)."""

    log: str | None
    segment: int | None
    ledger_id: int
    first: int
    last: int
    #: Average payload size, when known (a closed segment), to size the read chunks.
    entry_size: int = 0
    #: The entries are log records in envelopes (a log segment's; ledgers read raw).
    enveloped: bool = False
    #: The segment's recorded time range (ms; -1: not known), for pruning by timestamp.
    min_ts: int = -1
    max_ts: int = -1
    #: An offloaded segment's object, read from its tier instead of the bookies (empty: the
    #: bookies): the tier's URI, the object's key and size (see :mod:`bkframe_spark.tier_reading`).
    tier: str = ""
    key: str = ""
    object_size: int = 0
    #: The segment's ledger is still on the bookies: a read the tier fails goes there.
    on_bookies: bool = True
    #: What the log's record says of the object: its footer's CRC32C (0: not recorded), the
    #: entry count and entry checksum it was verified against. A footer that differs is a
    #: damaged object, never read.
    footer_crc32c: int = 0
    object_entries: int = 0
    object_checksum: int = 0
    #: A compacted segment's ledger (docs/compaction.md): the records it kept, then its
    #: index's entries; ``first..last`` are positions, read through the index. -1: not compacted.
    compacted_kept: int = -1
    compacted_index_entries: int = 0

    @property
    def entries(self) -> int:
        return self.last - self.first + 1
