"""Log records as Arrow columns: entries decoded into a read's columns, a write's rows
encoded into entries.

A log entry is a record in an envelope (docs/logs.md, "The envelope"): a flags byte, an
8-byte timestamp, then if the flags say so a key and properties, then the payload. Reads
decode a chunk of entries into columns without a Python object per field where the
envelope allows it: the entries go into one Arrow buffer once, flags and timestamps are
gathered from it with numpy, and payloads and keys are cut from it by Arrow kernels (records
with no key and no properties, the common case, are one ``binary_slice``). Only the
properties of records that have some are read one by one, into the map column.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructType, TimestampType

from bkframe import BadRecordError, Record, encode_record
from bkframe.errors import BKError

log = logging.getLogger("bkframe.spark")

#: The envelope (docs/logs.md): flags, then a little-endian i64 timestamp; the flags' bits.
HEAD = 9
KEY = 0x01
PROPERTIES = 0x02
EVENT_TIME = 0x04
_KNOWN_FLAGS = KEY | PROPERTIES | EVENT_TIME
_U32 = struct.Struct("<I")

#: Arrow types of the record columns, as Spark expects them for its schema (timestamps in
#: microseconds, UTC; properties a map of non-null strings).
TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False))
#: ``binary_slice``'s end for "to the end of the value" (its default misbehaves).
_TO_THE_END = 2**31 - 1

#: The columns a read has that a write takes no value from: a copy from one log to another
#: carries them, and the entries get positions of the log they are written to.
READ_ONLY = ("log", "position", "segment", "ledger_id", "entry_id", "offset")


class DataError(BKError, ValueError):
    """A row cannot be written (no payload column, a null payload, a column of a wrong type)."""


# -- reading -------------------------------------------------------------------------------


def empty_properties(n: int) -> pa.MapArray:
    offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
    return pa.MapArray.from_arrays(offsets, pa.array([], pa.string()), pa.array([], pa.string()), type=PROPERTIES_TYPE)


def raw_columns(raw: pa.BinaryArray) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """(payload, key, timestamp, properties) of entries that are plain payloads (a raw
    segment, or ledgers read directly): no key, no time, no properties."""
    n = len(raw)
    return raw, pa.nulls(n, pa.binary()), pa.nulls(n, TIMESTAMP), empty_properties(n)


def envelope_columns(
    raw: pa.BinaryArray, entries: Sequence[bytes], where: Callable[[int], str]
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """(payload, key, timestamp, properties) of envelope entries; ``raw`` holds ``entries``
    as one Arrow array; ``where(i)`` names entry ``i`` in an error."""
    n = len(raw)
    if n == 0:
        return raw_columns(raw)
    if raw.offset != 0 or raw.null_count:
        raw = pa.array(entries, pa.binary())
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data_buffer = raw.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    short = np.flatnonzero(ends - starts < HEAD)
    if short.size:
        i = int(short[0])
        raise BadRecordError(f"{where(i)}: a log entry of {ends[i] - starts[i]} bytes is shorter than its {HEAD}-byte envelope")
    flags = data[starts]
    unknown = np.flatnonzero(flags & ~np.uint8(_KNOWN_FLAGS))
    if unknown.size:
        i = int(unknown[0])
        raise BadRecordError(
            f"{where(i)}: a log entry has envelope flags {int(flags[i]):#04x} this bkframe does not know "
            "(written by a newer one?); upgrade the reader"
        )
    # Eight bytes after each entry's flags, gathered into one little-endian int64 array.
    millis = data[starts[:, None] + np.arange(1, HEAD)].view("<i8").reshape(n)
    timestamps = pa.array(millis * 1000, TIMESTAMP)
    if not (flags & (KEY | PROPERTIES)).any():
        payload = pc.binary_slice(raw, HEAD, _TO_THE_END)
        return payload, pa.nulls(n, pa.binary()), timestamps, empty_properties(n)
    return _split(raw, entries, where, starts, ends, data, flags, timestamps)


def _split(
    raw: pa.BinaryArray,
    entries: Sequence[bytes],
    where: Callable[[int], str],
    starts: np.ndarray,
    ends: np.ndarray,
    data: np.ndarray,
    flags: np.ndarray,
    timestamps: pa.Array,
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """Entries some of which have a key or properties. Each entry is cut into four values
    of one Arrow array over the same buffer -- head, key, properties, payload -- whose
    offsets run on (each piece starts where the one before ends), so the keys and the
    payloads are two ``take``s, no Python object per value."""
    n = len(starts)
    has_key = (flags & KEY) != 0
    key_start = starts + HEAD + 4 * has_key
    key_len = np.zeros(n, dtype=np.int64)
    keyed = np.flatnonzero(has_key)
    if keyed.size:
        short = keyed[ends[keyed] < key_start[keyed]]
        if short.size:
            raise BadRecordError(f"{where(int(short[0]))}: a log entry's envelope runs past its end")
        key_len[keyed] = data[(starts[keyed] + HEAD)[:, None] + np.arange(4)].view("<u4").reshape(keyed.size)
    key_end = key_start + key_len
    past = np.flatnonzero(key_end > ends)
    if past.size:
        i = int(past[0])
        raise BadRecordError(f"{where(i)}: a log entry's key length {key_len[i]} runs past its end ({ends[i] - starts[i]} bytes)")
    payload_start = key_end.copy()
    counts = np.zeros(n, dtype=np.int32)
    names: list[str] = []
    values: list[str] = []
    for i in np.flatnonzero(flags & PROPERTIES).tolist():
        before = len(names)
        try:
            payload_start[i] = starts[i] + _properties(entries[i], int(key_end[i] - starts[i]), names, values)
        except (struct.error, UnicodeDecodeError, ValueError) as e:
            raise BadRecordError(f"{where(i)}: a log entry's properties do not decode ({e})") from None
        counts[i] = len(names) - before
    pieces = np.empty(4 * n + 1, dtype=np.int32)
    pieces[0:-1:4], pieces[1:-1:4], pieces[2:-1:4], pieces[3:-1:4] = starts, key_start, key_end, payload_start
    pieces[-1] = ends[-1]
    split = pa.Array.from_buffers(pa.binary(), 4 * n, [None, pa.py_buffer(pieces), raw.buffers()[2]])
    payload = split.take(pa.array(np.arange(3, 4 * n, 4)))
    keys = pc.if_else(pa.array(has_key), split.take(pa.array(np.arange(1, 4 * n, 4))), pa.scalar(None, pa.binary()))
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    properties = pa.MapArray.from_arrays(
        pa.array(map_offsets), pa.array(names, pa.string()), pa.array(values, pa.string()), type=PROPERTIES_TYPE
    )
    return payload, keys, timestamps, properties


def _properties(entry: bytes, at: int, names: list[str], values: list[str]) -> int:
    """Append the properties that start at ``at`` in ``entry`` (u32 count, then per property
    u32 length and UTF-8 name, u32 length and UTF-8 value) to ``names`` and ``values``;
    return where they end (the payload's start)."""
    (count,) = _U32.unpack_from(entry, at)
    at += 4
    if count * 8 > len(entry) - at:
        raise ValueError(f"{count} properties cannot fit in {len(entry)} bytes")
    for _ in range(count):
        (n,) = _U32.unpack_from(entry, at)
        name_end = at + 4 + n
        (m,) = _U32.unpack_from(entry, name_end)
        value_end = name_end + 4 + m
        if value_end > len(entry):
            raise ValueError("a property runs past the entry's end")
        names.append(entry[at + 4 : name_end].decode())
        values.append(entry[name_end + 4 : value_end].decode())
        at = value_end
    return at


# -- writing -------------------------------------------------------------------------------


@attrs.frozen
class WriteColumns:
    """Where a written DataFrame's record fields are: column indexes (None: absent)."""

    payload: int
    key: int | None = None
    timestamp: int | None = None
    properties: int | None = None
    #: Read columns the DataFrame has (see :data:`READ_ONLY`), not written.
    ignored: tuple[str, ...] = ()
    #: The ``log`` column (any type): a write with no ``log`` option routes each row by it
    #: (:mod:`bkframe_spark.routing`); with the option, it is one of the ignored columns.
    log: int | None = None

    @property
    def payload_only(self) -> bool:
        return self.key is None and self.timestamp is None and self.properties is None

    @classmethod
    def of(cls, schema: StructType) -> WriteColumns:
        """The columns of ``schema`` a write takes; :class:`DataError` naming any it cannot."""
        found: dict[str, int] = {}
        ignored: list[str] = []
        unknown: list[str] = []
        for i, field in enumerate(schema.fields):
            name, kind = field.name.lower(), field.dataType
            if name == "log":
                found[name] = i
            if name in READ_ONLY:
                ignored.append(field.name)
                continue
            if name not in ("payload", "key", "timestamp", "properties"):
                unknown.append(field.name)
                continue
            ok = {
                "payload": isinstance(kind, (BinaryType, StringType)),
                "key": isinstance(kind, (BinaryType, StringType)),
                # TimestampType is an instant (timestamp_ntz, a wall-clock time, is not).
                "timestamp": isinstance(kind, (TimestampType, LongType)),
                "properties": isinstance(kind, MapType)
                and isinstance(kind.keyType, StringType)
                and isinstance(kind.valueType, StringType),
            }[name]
            if not ok:
                raise DataError(f"column {field.name!r} is {kind.simpleString()}; format 'bkframe' writes {_WANTED[name]}")
            found[name] = i
        if "payload" not in found:
            raise DataError(
                f"format 'bkframe' writes the column 'payload' (binary or string) as one entry per row; the DataFrame has "
                f"{[f.name for f in schema.fields]} (select or alias one as 'payload')"
            )
        if unknown:
            raise DataError(
                f"format 'bkframe' does not know the column(s) {unknown}: it writes 'payload' with 'key', 'timestamp' "
                f"and 'properties' (and ignores the read columns {list(READ_ONLY)}); select the columns to write, or "
                f"fold the others into the payload (e.g. to_json(struct(...)) as payload)"
            )
        if ignored:
            log.info("writing to a log: column(s) %s are positions of a log read; the written entries get new ones", ignored)
        return cls(
            found["payload"], found.get("key"), found.get("timestamp"), found.get("properties"), tuple(ignored),
            found.get("log"),
        )


_WANTED = {
    "payload": "a binary or string 'payload' column (cast it, e.g. to_json(...) or .cast('binary'))",
    "key": "a binary or string 'key' column (null: no key)",
    "timestamp": "a 'timestamp' column of type timestamp, or bigint milliseconds since the epoch (null: the time "
    "of writing); cast a timestamp_ntz with to_utc_timestamp(...)",
    "properties": "a 'properties' column of type map<string,string>",
}


def encode_rows(batch: pa.RecordBatch, cols: WriteColumns, now: int) -> tuple[list[bytes], int, int]:
    """The entries of a batch of rows (records in envelopes; ``now``: the publish time, ms,
    of rows without a timestamp) and the smallest and largest timestamp among them."""
    payload = batch.column(cols.payload)
    if payload.null_count:
        raise DataError("column 'payload' has null values; entries are bytes: fill them (e.g. coalesce(payload, ''))")
    payloads = (payload if pa.types.is_binary(payload.type) else payload.cast(pa.binary())).to_pylist()
    if cols.payload_only:
        head = encode_record(b"", now=now)  # a record with no key and no properties: this, then its payload
        return [head + p for p in payloads], now, now
    n = len(payloads)
    keys: list[bytes | None] = [None] * n
    if cols.key is not None:
        key = batch.column(cols.key)
        keys = (key if pa.types.is_binary(key.type) else key.cast(pa.binary())).to_pylist()
    stamps: list[int | None] = [None] * n
    low, high = (now, now)
    if cols.timestamp is not None:
        column = batch.column(cols.timestamp)
        millis = _millis(column)
        stamps = millis.to_pylist()
        given = millis.drop_null()
        if len(given):
            low, high = pc.min(given).as_py(), pc.max(given).as_py()
            if len(given) < n:  # some rows take the publish time
                low, high = min(low, now), max(high, now)
    properties: list[dict[str, str] | None] = [None] * n
    if cols.properties is not None:
        properties = [_properties_of(pairs) for pairs in batch.column(cols.properties).to_pylist()]
    head = encode_record(b"", now=now)
    out = []
    for p, k, t, props in zip(payloads, keys, stamps, properties):
        out.append(head + p if k is None and t is None and not props else encode_record(Record(p, k, t, props), now=now))
    return out, low, high


def _millis(column: pa.Array) -> pa.Array:
    """A timestamp column (or bigint milliseconds) as int64 milliseconds since the epoch."""
    ticks = column.cast(pa.int64())
    if not pa.types.is_timestamp(column.type) or column.type.unit == "ms":
        return ticks
    per_ms = {"s": 0, "us": 1_000, "ns": 1_000_000}[column.type.unit]
    values = ticks.fill_null(0).to_numpy()
    # Floor division: a time before the epoch stays in the millisecond it falls in.
    millis = values * 1000 if per_ms == 0 else values // per_ms
    return pa.array(millis, pa.int64(), mask=ticks.is_null().to_numpy(zero_copy_only=False))


def _properties_of(pairs: list[tuple[str, str | None]] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for name, value in pairs:
        if value is None:
            raise DataError(
                f"column 'properties' has a null value (property {name!r}); properties map strings to strings: "
                "drop it or fill it (e.g. map_filter(properties, (k, v) -> v is not null))"
            )
        out[name] = value
    return out
