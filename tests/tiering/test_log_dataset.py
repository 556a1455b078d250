"""A two-tiered log as one ``pyarrow.dataset.Dataset``, scanned by DuckDB and Polars.

A log of four closed segments and a hot one, segments 0-2 offloaded to a directory tier:
the snapshot is the objects as Parquet fragments plus the rest in memory, and SQL over it
(counts, sums, a filter on a time range, a filter on keys) gives what ``LogReader`` reads.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds

import bkframe
from bkframe import Position, Record
from bkframe.testing.cluster import Cluster

PASSWORD = b"lake"
BASE_MS = 1_764_140_400_000


def test_duckdb_and_polars_read_a_snapshot_of_offloaded_and_hot_segments(shared_cluster: Cluster, tmp_path: Path) -> None:
    name = f"lake-{uuid.uuid4().hex[:8]}"
    with bkframe.connect(shared_cluster.metadata) as bk:
        bk.logs.create(name, password=PASSWORD, rollover_entries=300)
        with bk.logs.open_writer(name, password=PASSWORD) as writer:
            writer.append_many(
                Record(b"x" * (i % 97), b"k%d" % (i % 5), BASE_MS + 1000 * i, {"n": str(i)} if i % 10 == 0 else None)
                for i in range(1250)
            )
        bk.logs.offload(name, tier=tmp_path.as_uri(), password=PASSWORD, until=Position(3, 0))
        reader = bk.logs.reader(name, password=PASSWORD)
        entries = reader.read()
        snapshot = reader.dataset()
        assert isinstance(snapshot, ds.UnionDataset)  # Parquet fragments of the 3 objects, and the hot rows
        files = [f for child in snapshot.children if isinstance(child, ds.FileSystemDataset) for f in child.files]
        assert sorted(Path(f).name for f in files) == sorted(p.name for p in tmp_path.rglob("*.parquet"))
        assert len(files) == 3
        part = reader.dataset(Position(1, 100), Position(4, 10))  # cut objects: their rows in memory
    total = sum(len(e.payload) for e in entries)
    keyed = sum(1 for e in entries if e.key == b"k3")
    assert duckdb.sql("select count(*), sum(octet_length(payload)) from snapshot").fetchall() == [(len(entries), total)]
    assert duckdb.sql("select count(*) from snapshot where key = 'k3'::blob").fetchall() == [(keyed,)]
    # Positions are unique and each entry's, as the reader gives them.
    got = duckdb.sql("select position, payload, epoch_ms(timestamp) from snapshot order by \"offset\"").fetchall()
    assert got == [(str(e.position), e.payload, e.timestamp) for e in entries]
    lo, hi = BASE_MS + 1000 * 500, BASE_MS + 1000 * 1000
    in_time = [e for e in entries if lo <= (e.timestamp or 0) < hi]
    frame = (
        pl.scan_pyarrow_dataset(snapshot)
        .filter(pl.col("timestamp").dt.epoch("ms").is_between(lo, hi, closed="left"))
        .select(pl.len(), pl.col("payload").bin.size().sum(), (pl.col("key") == b"k3").sum())
        .collect()
    )
    assert frame.row(0) == (len(in_time), sum(len(e.payload) for e in in_time), sum(e.key == b"k3" for e in in_time))
    inside = [e for e in entries if Position(1, 100) <= e.position < Position(4, 10)]
    assert part.count_rows() == len(inside)
    assert duckdb.sql("select count(*), min(position), max(position) from part").fetchall() == [
        (len(inside), "1:100", "4:9")
    ]
