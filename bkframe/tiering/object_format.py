"""The segment object's format: one closed segment of a log as one Parquet file.

**Columns.** The Spark connector's and ``LogReader.to_arrow``'s
(:func:`bkframe.client.logs.columns.schema`: log, position, segment, ledger_id, entry_id,
payload, key, timestamp, properties, offset), one row per entry in entry-id order, so that
any Parquet reader (Spark's own, DuckDB, Polars) yields the rows the connector yields; then
one more, ``flags`` (int8): the envelope's flags byte (key 1, properties 2, event time 4;
null in a raw segment). With it the object holds *everything* the ledger held: each entry's
exact bytes can be rebuilt from its row (:func:`entry_parts`), which is what the checksum
is over and what ``LogEntry.event_time`` needs once the ledger is gone.

**Row groups** are cut at a byte target of entries (:attr:`ObjectOptions.row_group_bytes`,
32 MiB by default: a unit a scan reads whole, a Spark task's split). **Statistics** are
written for ``entry_id``, ``offset`` and ``timestamp`` only, so the footer alone says which
row group holds an entry, a position or a time; every page carries a CRC32 (Parquet's page
checksum), checked on every read.

**Footer metadata** (key-value, all strings): ``bkframe.*`` keys of :class:`SegmentContent`
-- the format version, the log's name and uid, the segment and its ledger, the first and
last entry id, the entry count, the bytes of entries and of payloads, the time range, and
the **entry checksum**: CRC32C chained over every entry in id order, each as its id (u64
LE), its length (u32 LE) and its bytes as the ledger stores them (envelope and payload).
The offload computes it while reading the ledger; verification recomputes it from the
object's rows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bkframe.client.logs import columns
from bkframe.client.logs.envelope import EVENT_TIME, FORMAT_ENVELOPE, FORMAT_RAW, KEY, PROPERTIES
from bkframe.client.read_handle import EntryBlock
from bkframe.errors import BKError

#: The object format's version (``bkframe.format`` in the footer); a reader refuses others.
FORMAT_VERSION = 1
#: The columns with statistics: what finds a row group from the footer alone.
STATISTICS = ("entry_id", "offset", "timestamp")
#: Columns worth a dictionary (few distinct values); payloads and positions are not.
DICTIONARY = ("log", "segment", "ledger_id", "key", "flags", "properties.key_value.key", "properties.key_value.value")
FLAGS = "flags"
_PREFIX = "bkframe."
_ENTRY_HEAD = struct.Struct("<QI")
_ENVELOPE_HEAD = struct.Struct("<Bq")
_U32 = struct.Struct("<I")


class CorruptObjectError(BKError):
    """A tier's object is not the segment it should be: truncated, a byte changed, another
    object under its key, or not a segment object at all. Never returned as data."""


def object_schema() -> pa.Schema:
    """The connector's columns, then ``flags``."""
    return columns.schema().append(pa.field(FLAGS, pa.int8()))


@attrs.frozen
class ObjectOptions:
    """How segment objects are written."""

    #: A row group is cut once its entries (as the ledger stores them) reach this many bytes.
    row_group_bytes: int = 32 << 20
    #: Parquet's page compression: any pyarrow names (``zstd``, ``snappy``, ``lz4``, ``none``).
    compression: str = "zstd"
    compression_level: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.row_group_bytes <= 0:
            raise ValueError(f"row_group_bytes must be > 0, got {self.row_group_bytes}")

    def writer_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`pyarrow.parquet.ParquetWriter`."""
        return {
            "compression": self.compression,
            "compression_level": self.compression_level,
            "write_statistics": list(STATISTICS),
            "write_page_checksum": True,
            "use_dictionary": list(DICTIONARY),
            # Rows are in entry-id order: engines may rely on it (and merge without sorting).
            "sorting_columns": [pq.SortingColumn(object_schema().get_field_index("entry_id"))],
        }


@attrs.frozen
class SegmentContent:
    """What a segment object holds, as its footer says and as the ledger read found it."""

    log: str
    log_uid: str
    segment: int
    ledger_id: int
    #: :data:`~bkframe.client.logs.envelope.FORMAT_ENVELOPE` or ``FORMAT_RAW``.
    segment_format: int
    first_entry_id: int
    last_entry_id: int
    entries: int
    #: The entries' bytes as the ledger stores them (envelopes included).
    entry_bytes: int
    payload_bytes: int
    #: CRC32C chained over every entry (see the module's docstring).
    checksum: int
    #: The smallest and largest timestamp (ms since the epoch); -1 when none (raw).
    min_ts: int = -1
    max_ts: int = -1
    format_version: int = FORMAT_VERSION

    def footer(self) -> dict[str, str]:
        """The footer's key-value metadata."""
        return {_PREFIX + k: str(v) for k, v in attrs.asdict(self).items()}

    @classmethod
    def from_footer(cls, metadata: Mapping[bytes, bytes] | None) -> SegmentContent:
        """Read back from a footer; ValueError naming what is missing or bad."""
        found = {k.decode(): v.decode() for k, v in (metadata or {}).items() if k.startswith(_PREFIX.encode())}
        values: dict[str, Any] = {}
        for field in attrs.fields(cls):
            text = found.get(_PREFIX + field.name)
            if text is None:
                raise ValueError(f"its footer has no {_PREFIX + field.name}: not a bkframe segment object")
            values[field.name] = text if field.type in ("str", str) else _int(field.name, text)
        content = cls(**values)
        if content.format_version != FORMAT_VERSION:
            raise ValueError(
                f"it is of format {content.format_version}; this bkframe reads format {FORMAT_VERSION} (upgrade it)"
            )
        return content

    def differences(self, other: SegmentContent) -> list[str]:
        """Each field that differs, as ``name X, expected Y`` (``self`` is what was found)."""
        shown = {"checksum": "{:08x}"}
        return [
            f"{name} {shown.get(name, '{}').format(mine)}, expected {shown.get(name, '{}').format(theirs)}"
            for name, mine in attrs.asdict(self).items()
            if mine != (theirs := getattr(other, name))
        ]

    @property
    def enveloped(self) -> bool:
        return self.segment_format == FORMAT_ENVELOPE


def _int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"its footer's {_PREFIX + name} is {text!r}, not a number") from None


@attrs.frozen
class ObjectSummary:
    """A segment object as written and put in a tier: what the log's metadata records."""

    key: str
    #: Bytes, and CRC32C of all of them: the whole object, as put.
    size: int
    object_crc32c: int
    row_groups: int
    content: SegmentContent
    #: CRC32C of its footer's bytes (from the footer's start to the object's end).
    footer_crc32c: int = 0

    @property
    def entries(self) -> int:
        return self.content.entries

    @property
    def checksum(self) -> int:
        return self.content.checksum


class EntryChecksum:
    """The entry checksum, fed entry by entry in id order."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, entry_id: int, data: bytes | memoryview) -> None:
        self.value = crc32c.crc32c(data, crc32c.crc32c(_ENTRY_HEAD.pack(entry_id, len(data)), self.value))

    def add_parts(self, entry_id: int, parts: list[bytes | memoryview]) -> None:
        """An entry given as consecutive pieces of its bytes."""
        crc = crc32c.crc32c(_ENTRY_HEAD.pack(entry_id, sum(map(len, parts))), self.value)
        for part in parts:
            crc = crc32c.crc32c(part, crc)
        self.value = crc

    def add_block(self, block: EntryBlock) -> None:
        view = memoryview(block.data)
        for entry_id, start, end in zip(block.entry_ids.tolist(), block.starts.tolist(), block.ends.tolist()):
            self.add(entry_id, view[start:end])


def flags_column(block: EntryBlock, segment_format: int) -> pa.Array:
    """The ``flags`` column of a block's entries: each envelope's first byte (null if raw)."""
    if segment_format == FORMAT_RAW:
        return pa.nulls(len(block), pa.int8())
    raw = np.frombuffer(block.data, dtype=np.uint8)
    return pa.array(raw[block.starts].astype(np.int8))


def entry_parts(table: pa.Table | pa.RecordBatch) -> Iterator[tuple[int, list[bytes | memoryview]]]:
    """Each row's entry id and the ledger entry it was made of, in pieces: the envelope
    rebuilt from ``flags``, ``timestamp``, ``key`` and ``properties`` (as the writer encoded
    it), then the payload -- or the payload alone in a raw segment (null ``flags``)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    ids = table.column("entry_id").to_numpy()
    flags_valid = table.column(FLAGS).is_valid().to_numpy(zero_copy_only=False)
    flags = table.column(FLAGS).fill_null(0).to_numpy().astype(np.int64)
    millis = table.column("timestamp").cast(pa.int64()).fill_null(0).to_numpy()
    payloads = _binary_views(table.column("payload"))
    extra = (flags & (KEY | PROPERTIES)) != 0
    keys = table.column("key").to_pylist() if extra.any() else None
    props = table.column("properties").to_pylist() if extra.any() else None
    for i in range(len(ids)):
        entry_id = int(ids[i])
        if not flags_valid[i]:
            yield entry_id, [payloads[i]]
            continue
        f = int(flags[i]) & 0xFF
        head = [_ENVELOPE_HEAD.pack(f, int(millis[i]))]
        if extra[i]:
            assert keys is not None and props is not None
            if f & KEY:
                key = keys[i] or b""
                head += (_U32.pack(len(key)), key)
            if f & PROPERTIES:
                head.append(_U32.pack(len(props[i] or ())))
                for name, value in props[i] or ():
                    n, v = name.encode(), value.encode()
                    head += (_U32.pack(len(n)), n, _U32.pack(len(v)), v)
        yield entry_id, [b"".join(head), payloads[i]]


def _binary_views(column: pa.ChunkedArray) -> list[memoryview]:
    """Each value of a binary column as a view into Arrow's buffer (no copy)."""
    out: list[memoryview] = []
    for chunk in column.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
        data = memoryview(chunk.buffers()[2] or b"")
        bounds = offsets.tolist()
        out += (data[bounds[i] : bounds[i + 1]] for i in range(len(chunk)))
    return out


def event_times(flags: pa.Array | pa.ChunkedArray) -> list[bool]:
    """Per row: the timestamp is the writer's event time (the envelope's flag)."""
    return ((flags.fill_null(0).to_numpy().astype(np.int64) & EVENT_TIME) != 0).tolist()
