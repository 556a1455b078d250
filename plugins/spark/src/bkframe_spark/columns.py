"""Log records as Arrow columns: the types of a read's record columns, and a write's rows
encoded into entries.

A log entry is a record in an envelope (docs/logs.md, "The envelope"). Reads decode a chunk
of entries with the client's decoder (:func:`bkframe.decode_envelopes`: no Python object per
field, where the read left the entries) and give the columns the types Spark expects here.
"""

from __future__ import annotations

import logging

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructType, TimestampType

from bkframe import Record, encode_record
from bkframe.errors import BKError

log = logging.getLogger("bkframe.spark")

#: Arrow types of the record columns, as Spark expects them for its schema (timestamps in
#: microseconds, UTC; properties a map of non-null strings).
TIMESTAMP = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False))

#: The columns a read has that a write takes no value from: a copy from one log to another
#: carries them, and the entries get positions of the log they are written to.
READ_ONLY = ("log", "position", "segment", "ledger_id", "entry_id", "offset")


class DataError(BKError, ValueError):
    """A row cannot be written (no payload column, a null payload, a column of a wrong type)."""


# -- reading -------------------------------------------------------------------------------


def empty_properties(n: int) -> pa.MapArray:
    offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
    return pa.MapArray.from_arrays(offsets, pa.array([], pa.string()), pa.array([], pa.string()), type=PROPERTIES_TYPE)


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
