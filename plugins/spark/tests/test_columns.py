"""Records as Arrow columns, without Spark: what a write makes of a DataFrame's rows, what a
read makes of the entries, and how filters on the new columns prune a read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from bkframe_spark.columns import DataError, WriteColumns, encode_rows
from bkframe_spark.options import OptionError, Options
from bkframe_spark.reading import ARROW_SCHEMA, SCHEMA, EntryRange, check_schema, to_batch
from bkframe_spark.routing import routes_rows, split_by_log
from bkframe_spark.source import narrow
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from bkframe import BadRecordError, Entry, Record, decode_record, encode_record

NOW = 1_700_000_000_000
T0 = 1_600_000_000_000


def schema(**columns: Any) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])


def test_which_columns_a_write_takes() -> None:
    cols = WriteColumns.of(schema(key=StringType(), Payload=BinaryType(), timestamp=LongType(),
                                  properties=MapType(StringType(), StringType())))
    assert (cols.payload, cols.key, cols.timestamp, cols.properties) == (1, 0, 2, 3)
    # A copy of a read carries the read's positions: they are not written (the entries get new ones).
    copy = WriteColumns.of(StructType([f for f in SCHEMA.fields]))
    assert copy.ignored == ("log", "position", "segment", "ledger_id", "entry_id", "offset") and copy.payload == 5
    for bad, message in [
        (schema(id=LongType()), "writes the column 'payload'"),
        (schema(payload=LongType()), "column 'payload' is bigint"),
        (schema(payload=StringType(), key=IntegerType()), "column 'key' is int; .* binary or string 'key'"),
        (schema(payload=StringType(), timestamp=TimestampNTZType()), "'timestamp' is timestamp_ntz; .*to_utc_timestamp"),
        (schema(payload=StringType(), properties=MapType(StringType(), LongType())), "map<string,string>"),
        (schema(payload=StringType(), value=StringType(), topic=StringType()), r"know the column\(s\) \['value', 'topic'\]"),
    ]:
        with pytest.raises(DataError, match=message):
            WriteColumns.of(bad)


def rows_to_entries(table: pa.Table, cols: WriteColumns) -> tuple[list[bytes], int, int]:
    return encode_rows(table.to_batches()[0], cols, NOW)


def test_rows_become_records_and_read_back_as_columns() -> None:
    at = datetime.fromtimestamp((T0 + 7) / 1000, UTC)
    table = pa.table({
        "payload": pa.array(["a", "b", "c", "d"]),
        "key": pa.array([b"k1", None, b"", None]),
        "timestamp": pa.array([at, None, None, datetime.fromtimestamp(-0.0015, UTC)], pa.timestamp("us", tz="UTC")),
        "properties": pa.array([[("source", "web")], None, [], [("a", "1"), ("b", "é")]],
                               pa.map_(pa.string(), pa.string())),
    })
    cols = WriteColumns.of(schema(payload=StringType(), key=BinaryType(), timestamp=TimestampType(),
                                  properties=MapType(StringType(), StringType())))
    entries, low, high = rows_to_entries(table, cols)
    records = [decode_record(e) for e in entries]
    assert [(r.payload, r.key, r.timestamp, dict(r.properties), r.event_time) for r in records] == [
        (b"a", b"k1", T0 + 7, {"source": "web"}, True),
        (b"b", None, NOW, {}, False),  # no timestamp: the time of writing
        (b"c", b"", NOW, {}, False),
        (b"d", None, -2, {"a": "1", "b": "é"}, True),  # before the epoch: the millisecond it falls in
    ]
    assert (low, high) == (-2, NOW)  # the ledger's time range becomes its segment's

    batch = to_batch(EntryRange("copy", 3, 77, 10, 13, enveloped=True), [Entry(77, 10 + i, e) for i, e in enumerate(entries)])
    assert batch.schema.equals(to_arrow_schema(SCHEMA, timezone="UTC"))  # what Spark checks each batch against
    got = batch.to_pylist()
    assert [(r["payload"], r["key"], r["properties"]) for r in got] == [
        (b"a", b"k1", [("source", "web")]), (b"b", None, []), (b"c", b"", []), (b"d", None, [("a", "1"), ("b", "é")])
    ]
    assert [r["timestamp"] for r in got] == [at, *(datetime.fromtimestamp(t / 1000, UTC) for t in (NOW, NOW, -2))]
    assert [(r["log"], r["position"], r["segment"], r["ledger_id"], r["entry_id"]) for r in got][1] == ("copy", "3:11", 3, 77, 11)
    assert [r["offset"] for r in got] == [3 << 32 | e for e in range(10, 14)]  # sorts as positions do

    # A read of some columns (a .schema(...) naming them) gets those, in its order, the same values.
    part = EntryRange("copy", 3, 77, 10, 13, enveloped=True)
    some = to_batch(part, [Entry(77, 10 + i, e) for i, e in enumerate(entries)], check_schema(
        schema(offset=LongType(), payload=BinaryType(), key=BinaryType())
    ))
    assert some.schema.names == ["offset", "payload", "key"]
    assert some.to_pylist() == [{k: r[k] for k in ("offset", "payload", "key")} for r in got]
    raw = to_batch(EntryRange(None, None, 5, 0, 0), [Entry(5, 0, b"raw")], check_schema(
        schema(position=StringType(), payload=BinaryType())
    ))
    assert raw.to_pylist() == [{"position": None, "payload": b"raw"}]


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (schema(payload=StringType()), "column 'payload' is binary, not string"),
        (schema(value=BinaryType()), "column 'value' is not one of them"),
        (StructType([]), "no column"),
    ],
)
def test_a_read_schema_names_some_of_the_columns_with_their_types(given: StructType, why: str) -> None:
    assert check_schema(SCHEMA) == ARROW_SCHEMA
    assert check_schema(schema(key=BinaryType(), payload=BinaryType())).names == ["key", "payload"]
    with pytest.raises(OptionError, match=f"a .schema\\(...\\) may name some of them.*{why}"):
        check_schema(given)


def test_timestamps_as_milliseconds_and_payload_only_rows() -> None:
    table = pa.table({"payload": pa.array([b"x", b"y"]), "timestamp": pa.array([T0, None], pa.int64())})
    entries, low, high = rows_to_entries(table, WriteColumns.of(schema(payload=BinaryType(), timestamp=LongType())))
    assert [decode_record(e).timestamp for e in entries] == [T0, NOW] and (low, high) == (T0, NOW)
    plain, low, high = rows_to_entries(pa.table({"payload": pa.array(["p"])}), WriteColumns.of(schema(payload=StringType())))
    assert plain == [encode_record(b"p", now=NOW)] and (low, high) == (NOW, NOW)


def test_bad_rows_are_named() -> None:
    with pytest.raises(DataError, match="column 'payload' has null values"):
        rows_to_entries(pa.table({"payload": pa.array([b"x", None])}), WriteColumns.of(schema(payload=BinaryType())))
    props = pa.table({"payload": pa.array([b"x"]), "properties": pa.array([[("k", None)]], pa.map_(pa.string(), pa.string()))})
    with pytest.raises(DataError, match="null value \\(property 'k'\\)"):
        rows_to_entries(props, WriteColumns.of(schema(payload=BinaryType(), properties=MapType(StringType(), StringType()))))


def test_raw_entries_and_ledgers_read_with_no_key_time_or_properties() -> None:
    got = to_batch(EntryRange(None, None, 5, 0, 1), [Entry(5, 0, b"raw-0"), Entry(5, 1, b"raw-1")]).to_pylist()
    assert [(r["payload"], r["key"], r["timestamp"], r["properties"], r["offset"], r["position"]) for r in got] == [
        (b"raw-0", None, None, [], None, None), (b"raw-1", None, None, [], None, None)
    ]
    raw_segment = to_batch(EntryRange("old", 0, 5, 0, 0), [Entry(5, 0, b"\x00payload")]).to_pylist()[0]
    assert (raw_segment["payload"], raw_segment["timestamp"], raw_segment["offset"]) == (b"\x00payload", None, 0)


def test_a_bad_envelope_names_the_entry() -> None:
    part = EntryRange("events", 2, 9, 0, 2, enveloped=True)
    good = encode_record(Record(b"ok", key=b"k"), now=NOW)
    for bad, message in [
        (b"short", "entry 2:1: a log entry of 5 bytes is shorter than its 9-byte envelope"),
        (b"\x80" + bytes(8), "entry 2:1: .*flags 0x80 .*upgrade the reader"),
        (b"\x01" + bytes(8) + b"\xff\x00\x00\x00ab", "entry 2:1: a log entry's key length 255 runs past its end"),
        (b"\x02" + bytes(8) + b"\x09\x00\x00\x00", "entry 2:1: a log entry's properties do not decode"),
    ]:
        with pytest.raises(BadRecordError, match=f"log 'events': {message}"):
            to_batch(part, [Entry(9, 0, good), Entry(9, 1, bad), Entry(9, 2, good)])


def test_read_columns_in_spark_order() -> None:
    assert SCHEMA.names[:6] == ["log", "position", "segment", "ledger_id", "entry_id", "payload"]  # as before records
    assert SCHEMA.names[6:] == ["key", "timestamp", "properties", "offset"]
    assert ARROW_SCHEMA.field("timestamp").type == pa.timestamp("us", tz="UTC")


def test_timestamp_and_offset_filters_prune_a_read() -> None:
    us = 1000  # filters on timestamp come in microseconds, segments record milliseconds
    parts = [
        EntryRange("e", 0, 10, 0, 99, enveloped=False),  # raw: null timestamps
        EntryRange("e", 1, 11, 0, 99, enveloped=True, min_ts=1000, max_ts=1999),
        EntryRange("e", 2, 12, 0, 99, enveloped=True, min_ts=2000, max_ts=2999),
        EntryRange("e", 3, 13, 0, 99, enveloped=True),  # open or recovered: times not recorded
    ]

    def kept(*constraints: tuple[str, str, tuple[int, ...]]) -> list[int | None]:
        return [p.segment for p in narrow(parts, list(constraints))]

    assert kept(("timestamp", ">=", (2000 * us,))) == [2, 3]
    assert kept(("timestamp", ">", (1999 * us,))) == [2, 3]
    assert kept(("timestamp", "<", (2000 * us,))) == [1, 3]
    assert kept(("timestamp", "<=", (2000 * us,))) == [1, 2, 3]
    assert kept(("timestamp", "=", (1500 * us,))) == [1, 3]
    assert kept(("timestamp", "in", (5 * us, 2500 * us))) == [2, 3]
    # offset = segment << 32 | entry_id: narrowed to the entries that can match.
    got = narrow(parts, [("offset", ">", ((1 << 32) | 49,)), ("offset", "<=", ((2 << 32) | 9,))])
    assert [(p.segment, p.first, p.last) for p in got] == [(1, 50, 99), (2, 0, 9)]
    assert [(p.segment, p.first, p.last) for p in narrow(parts, [("offset", "=", ((3 << 32) | 7,))])] == [(3, 7, 7)]
    assert narrow([EntryRange(None, None, 5, 0, 9)], [("offset", ">=", (0,))]) == []  # ledgers have no offsets


def test_rows_routed_by_their_log_column() -> None:
    """A write with no 'log' option and a 'log' column routes each row (the option, when
    given, wins: a copy of a read into one log ignores the read's 'log' column, as before)."""
    cols = WriteColumns.of(schema(log=StringType(), payload=StringType()))
    assert (cols.log, cols.payload, cols.ignored) == (0, 1, ("log",))
    routed = Options.parse({"metadata": "sqlite:///x.db"})
    assert routes_rows(routed, schema(log=StringType(), payload=StringType()), cols)
    assert not routes_rows(Options.parse({"metadata": "sqlite:///x.db", "log": "one"}), schema(log=StringType()), cols)
    with pytest.raises(DataError, match=r"column 'log' is int; .*string 'log' column"):
        routes_rows(routed, schema(log=IntegerType(), payload=StringType()), cols)

    table = pa.table({"log": ["b", "a", "b", "c", "a"], "payload": ["1", "2", "3", "4", "5"]})
    parts = split_by_log(table.to_batches()[0], 0)
    # Each log's rows in their order (the order they take in the log).
    assert {name: part.column(1).to_pylist() for name, part in parts.items()} == {"a": ["2", "5"], "b": ["1", "3"], "c": ["4"]}
    one = table.slice(0, 1).to_batches()[0]
    assert split_by_log(one, 0) == {"b": one}  # one log: the batch as it is
    for values, message in [
        (["a", None], r"column 'log' is null in a row \(1 of a batch of 2\).*coalesce"),
        (["a", "no way!"], "column 'log': bad log name 'no way!'"),
    ]:
        bad = pa.table({"log": pa.array(values, pa.string()), "payload": ["x", "y"]}).to_batches()[0]
        with pytest.raises(DataError, match=message):
            split_by_log(bad, 0)
