"""A segment object's footer, and what it tells a reader without reading anything else.

A Parquet file ends with its footer (the schema, each row group's column chunks with their
offsets, sizes and statistics, and key-value metadata), the footer's length (u32 LE) and
``PAR1``. A reader knows an object's size (the log's metadata records it, or a ``head``
gives it), fetches its last :data:`TAIL_BYTES` in one ranged get -- which holds the whole
footer unless the object has very many row groups (then one more get) -- and from then on
knows, for each row group, the entries and times it holds (the ``entry_id`` and
``timestamp`` statistics) and the byte range of its column chunks: a read of an entry range
fetches exactly the row groups that hold it, one ranged get each, and a seek by time only
the ``timestamp`` column chunk of one row group.

Nothing here does I/O: the blocking and the async readers (and verification) fetch the
ranges this plans, and :meth:`ObjectFooter.decode` decodes a row group from its bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import attrs
import crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from bkframe.tiering.object_format import CorruptObjectError, SegmentContent, object_schema
from bkframe.tiering.ranged_file import OutsideWindowsError, RangedFile

MAGIC = b"PAR1"
#: The tail fetched first: it holds the footer of an object of up to ~130 row groups (~1 KB
#: each), so one get for any segment up to the default rollover (2 GiB: 64 row groups).
TAIL_BYTES = 128 << 10
_FOOTER_END = struct.Struct("<I4s")


@attrs.frozen
class RowGroupSpan:
    """One row group: the entries and times it holds, and where its bytes are."""

    index: int
    rows: int
    first_entry_id: int
    last_entry_id: int
    #: Its timestamps' range (ms); -1 when it has none (a raw segment).
    min_ts: int
    max_ts: int
    #: Its column chunks' bytes: ``start..end`` of the object (end exclusive).
    start: int
    end: int
    #: Each top-level column's bytes within it (a map's two leaves as one range).
    columns: Mapping[str, tuple[int, int]]

    @property
    def size(self) -> int:
        return self.end - self.start


def tail_range(size: int) -> tuple[int, int]:
    """The (offset, length) to fetch first from an object of ``size`` bytes."""
    length = min(size, TAIL_BYTES)
    return size - length, length


def footer_start(key: str, size: int, tail: bytes) -> int:
    """Where the footer begins in the object, from its last bytes ``tail`` (at least 8)."""
    if size < 12 or len(tail) < 8:
        raise CorruptObjectError(f"tier object {key!r} of {size} bytes is too short to be Parquet (truncated?)")
    length, magic = _FOOTER_END.unpack_from(tail, len(tail) - 8)
    if magic != MAGIC:
        raise CorruptObjectError(f"tier object {key!r} does not end with Parquet's magic bytes (truncated?)")
    start = size - 8 - length
    if start < len(MAGIC):
        raise CorruptObjectError(f"tier object {key!r}: its footer of {length} bytes is longer than the object (truncated?)")
    return start


def check_footer_crc(key: str, raw: bytes, expected: int | None) -> None:
    """The footer's bytes ``raw`` (from :func:`footer_start` to the end) against the CRC32C
    the log's record holds, before pyarrow parses them: a byte changed there can make
    pyarrow's C++ throw where nothing catches it (pyarrow 26: a level histogram's size) and
    abort the whole process. ``expected`` None or 0: not recorded, not checked."""
    if expected:
        found = crc32c.crc32c(raw)
        if found != expected:
            raise CorruptObjectError(
                f"tier object {key!r}: its footer's CRC32C is {found:08x}, {expected:08x} was recorded (a byte changed)"
            )


def checked(key: str, offset: int, length: int, data: bytes) -> bytes:
    """``data``, a ranged get's answer, if it is as long as asked (else the object is short)."""
    if len(data) != length:
        raise CorruptObjectError(f"tier object {key!r}: bytes {offset}..{offset + length} came back as {len(data)} (truncated?)")
    return data


@attrs.frozen(eq=False)
class ObjectFooter:
    """What a segment object's footer says (cache it: the object never changes)."""

    key: str
    size: int
    metadata: pq.FileMetaData
    content: SegmentContent
    groups: tuple[RowGroupSpan, ...]
    #: Where the footer begins (the row groups' bytes end before it), and its bytes to the
    #: object's end (length and magic included).
    start: int
    raw: bytes

    @classmethod
    def parse(cls, key: str, size: int, tail_offset: int, tail: bytes) -> ObjectFooter:
        """The footer of the object ``key`` of ``size`` bytes from its bytes ``tail`` at
        ``tail_offset``, which must reach back to :func:`footer_start`."""
        start = footer_start(key, size, tail)
        if start < tail_offset:
            raise ValueError(f"the footer starts at {start}, before the {len(tail)} bytes given")
        try:
            metadata = pq.read_metadata(RangedFile(size, {tail_offset: tail}))
        except (OSError, pa.ArrowException) as e:
            raise CorruptObjectError(f"tier object {key!r}: its Parquet footer does not decode ({e})") from None
        try:
            content = SegmentContent.from_footer(metadata.metadata)
        except ValueError as e:
            raise CorruptObjectError(f"tier object {key!r}: {e}") from None
        names = metadata.schema.to_arrow_schema().names
        if names != object_schema().names:
            raise CorruptObjectError(f"tier object {key!r} has columns {names}, not a segment object's")
        # A compacted segment's object holds fewer rows than its entry ids span: its row
        # groups' ids have gaps (the records compaction dropped).
        gaps = content.entries != content.last_entry_id - content.first_entry_id + 1
        groups = tuple(_span(key, metadata, i, gaps=gaps) for i in range(metadata.num_row_groups))
        return cls(key, size, metadata, content, groups, start, tail[start - tail_offset :])

    def groups_for(self, first: int, last: int) -> list[RowGroupSpan]:
        """The row groups that hold entries ``first..last`` (inclusive), in order."""
        return [g for g in self.groups if g.last_entry_id >= first and g.first_entry_id <= last]

    def group_at_time(self, timestamp: int) -> RowGroupSpan | None:
        """The first row group with a record at or after ``timestamp`` (ms): the first one
        whose newest record is -- every record before it is earlier. None if there is none."""
        return next((g for g in self.groups if g.max_ts >= timestamp), None)

    def decode(self, group: RowGroupSpan, windows: dict[int, bytes], columns: Sequence[str] | None = None) -> pa.Table:
        """Row group ``group`` (its ``columns``, default all) from its bytes in ``windows``
        (offset -> bytes), page checksums checked."""
        file = RangedFile(self.size, windows)
        try:
            parquet = pq.ParquetFile(file, metadata=self.metadata, page_checksum_verification=True, pre_buffer=False)
            table: pa.Table = parquet.read_row_group(group.index, columns=list(columns) if columns is not None else None)
        except OutsideWindowsError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise CorruptObjectError(f"tier object {self.key!r}: row group {group.index} does not decode ({e})") from None
        if table.num_rows != group.rows:
            raise CorruptObjectError(f"tier object {self.key!r}: row group {group.index} has {table.num_rows} rows, "
                                     f"its footer says {group.rows}")
        return table


def _span(key: str, metadata: pq.FileMetaData, index: int, *, gaps: bool = False) -> RowGroupSpan:
    """Row group ``index``: its entries and times by its statistics, and its bytes. Its
    entry ids are consecutive, or (``gaps``: a compacted segment's object) ascending."""
    group = metadata.row_group(index)
    ranges: dict[str, tuple[int, int]] = {}
    stats: dict[str, tuple[int, int]] = {}
    for c in range(group.num_columns):
        chunk = group.column(c)
        name = chunk.path_in_schema.split(".")[0]
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        lo, hi = ranges.get(name, (first, first))
        ranges[name] = (min(lo, first), max(hi, first + chunk.total_compressed_size))
        if name in ("entry_id", "timestamp") and chunk.is_stats_set and chunk.statistics.has_min_max:
            stats[name] = (int(chunk.statistics.min_raw), int(chunk.statistics.max_raw))
    if "entry_id" not in stats:
        raise CorruptObjectError(f"tier object {key!r}: row group {index} has no entry id statistics")
    first_id, last_id = stats["entry_id"]
    span = last_id - first_id + 1
    if span < group.num_rows or (span != group.num_rows and not gaps):
        raise CorruptObjectError(
            f"tier object {key!r}: row group {index} says entries {first_id}..{last_id} in {group.num_rows} rows"
        )
    min_ts, max_ts = stats.get("timestamp", (-1, -1))
    return RowGroupSpan(
        index, group.num_rows, first_id, last_id, min_ts, max_ts,
        min(lo for lo, _ in ranges.values()), max(hi for _, hi in ranges.values()), ranges,
    )
