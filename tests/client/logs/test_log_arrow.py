"""A live log read as Arrow by plain-Python analytics, no JVM: DuckDB and Polars query an
exact, repeatable prefix of it while a writer goes on appending, on three real bookies."""

from __future__ import annotations

import time

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import trio

import bkframe
from bkframe import Position, Record
from bkframe.client.logs import columns
from bkframe.testing.cluster import Cluster


def test_duckdb_and_polars_read_a_repeatable_prefix_of_a_live_log(shared_cluster: Cluster) -> None:
    # The open segment's LAC reaches its bookies by itself once the writer pauses.
    with bkframe.connect(shared_cluster.metadata, explicit_lac_interval_s=0.05) as bk:
        bk.logs.create("clicks", rollover_entries=400)
        writer = bk.logs.open_writer("clicks")
        base = 1_764_140_400_000
        # 1,000 records over three segments: keys k0..k4, event times a second apart, some properties.
        writer.append_many(
            [
                Record(b"%d" % i, key=b"k%d" % (i % 5), timestamp=base + 1000 * i,
                       properties={"src": "web"} if i % 10 == 0 else None)
                for i in range(1000)
            ]
        )
        writer.append(b"plain")  # no key, the publish time
        writer.flush()
        reader = bk.logs.reader("clicks")
        deadline = time.monotonic() + 10
        while (end := reader.end()) != Position(2, 201) and time.monotonic() < deadline:
            time.sleep(0.05)
        clicks = reader.to_arrow(end=end)
        # The writer goes on; the snapshot does not move.
        writer.append_many([b"later"] * 50)

        assert clicks.num_rows == 1001 and clicks.schema.metadata[b"bkframe.end"] == str(end).encode()
        assert clicks.schema.names == [
            "log", "position", "segment", "ledger_id", "entry_id", "payload", "key", "timestamp", "properties", "offset"
        ]
        per_key = duckdb.sql(
            "select key::varchar as key, count(*) as n, min(timestamp) as first from clicks where key is not null "
            "group by key order by key"
        ).fetchall()
        assert [(k, n) for k, n, _ in per_key] == [(f"k{i}", 200) for i in range(5)]
        # Positions sort as the log does, by offset; the last record has no key and a publish time.
        frame = pl.from_arrow(clicks)
        assert isinstance(frame, pl.DataFrame)
        ordered = frame.sort("offset")
        assert ordered["payload"].to_list()[:3] == [b"0", b"1", b"2"] and ordered["payload"][-1] == b"plain"
        assert ordered["position"].to_list()[400] == "1:0" and ordered["key"][-1] is None
        assert duckdb.sql("select count(*) from clicks where properties['src'] = 'web'").fetchall() == [(100,)]
        # The same range read again, later, is the same table (the log grew meanwhile).
        again = bk.logs.reader("clicks").to_arrow(end=end)
        assert again.equals(clicks)
        # Streaming: DuckDB scans a RecordBatchReader a chunk at a time.
        stream = bk.logs.reader("clicks").record_batch_reader(Position(2, 0), end)  # noqa: F841 - DuckDB scans it by name
        assert duckdb.sql("select count(*) from stream").fetchall() == [(201,)]
        writer.close()


def test_columns_decode_every_kind_of_record() -> None:
    """The vectorised decoder agrees with the one-by-one decoder on a mixed batch."""
    rng = np.random.default_rng(7)
    records = []
    for i in range(300):
        key = bytes(rng.integers(0, 256, int(rng.integers(0, 20)), dtype=np.uint8)) if i % 3 else None
        props = {f"p{i % 4}": "v" * (i % 7)} if i % 5 == 0 else None
        ts = int(rng.integers(0, 2**40)) if i % 2 else None
        records.append(Record(bytes(rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8)), key, ts, props))
    raw = [bkframe.encode_record(r, now=123) for r in records]
    batch = columns.record_batch("l", 3, 9, range(len(raw)), raw, enveloped=True)
    rows = batch.to_pylist()
    stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for r, row, ms in zip(records, rows, stamps):
        assert row["payload"] == r.payload and row["key"] == r.key
        assert dict(row["properties"]) == (r.properties or {})
        assert ms == (r.timestamp if r.timestamp is not None else 123)
    assert batch.column("offset").to_pylist()[:2] == [3 << 32, (3 << 32) | 1]
    with pytest.raises(bkframe.BadRecordError, match="shorter than its 9-byte envelope"):
        columns.record_batch("l", 0, 1, [0], [b"abc"], enveloped=True)
    raw_batch = columns.record_batch(None, None, 5, [0, 1], [b"x", b"y"], enveloped=False)
    assert raw_batch.column("payload").to_pylist() == [b"x", b"y"]
    assert raw_batch.column("timestamp").null_count == 2 and raw_batch.column("log").null_count == 2
    assert isinstance(raw_batch, pa.RecordBatch)


async def test_the_async_reader_gives_the_same_batches(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        await client.logs.create("async-arrow")
        async with await client.logs.open_writer("async-arrow") as w:
            await w.append_many([b"a", Record(b"b", key=b"k")])
        reader = await client.logs.reader("async-arrow")
        batches = [b async for b in reader.arrow_batches()]
        table = await reader.to_arrow()
        assert sum(b.num_rows for b in batches) == table.num_rows == 2
        assert table.column("key").to_pylist() == [None, b"k"]
        await trio.sleep(0)


def test_columns_cut_from_a_buffer_in_any_order() -> None:
    # A striped read's block: entries in id order, their bytes not (each replica's answer
    # is a piece of the buffer), with other bytes (entry headers) between them.
    records = {i: bkframe.encode_record(Record(b"p%d" % i, key=b"k%d" % i if i % 2 else None), now=7) for i in range(4)}
    layout = [2, 0, 3, 1]  # the order of the entries in the buffer
    data, at = b"", {}
    for i in layout:
        data += b"#" * 5
        at[i] = (len(data), len(data) + len(records[i]))
        data += records[i]
    starts = np.array([at[i][0] for i in range(4)], dtype=np.int64)
    ends = np.array([at[i][1] for i in range(4)], dtype=np.int64)
    rec = bkframe.decode_envelopes(data, starts, ends, lambda i: f"entry {i}")
    assert rec.payload.to_pylist() == [b"p0", b"p1", b"p2", b"p3"]
    assert rec.key.to_pylist() == [None, b"k1", None, b"k3"]
    assert rec.millis.tolist() == [7] * 4
    assert bkframe.payload_column(data, starts, ends).to_pylist() == [records[i] for i in range(4)]
