"""A task reads its partition one chunk ahead of Spark (``read_partition`` in this process,
no Spark job): the same rows in order, a read ahead's error where the chunk is consumed,
and a task that stops early cancels the chunk it read ahead."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio
from bkframe_spark import reading
from bkframe_spark.connection import client_for
from bkframe_spark.options import Options

import bkframe
from bkframe import BlockingClient, EntryBlock, PositionTrimmedError, ReadHandle
from bkframe.errors import NoSuchLedgerError
from bkframe.testing.cluster import Cluster

ROWS = 5000


@pytest.fixture(scope="module")
def log_opts(spark_cluster: Cluster, bk: BlockingClient) -> Options:
    bk.logs.create("read-ahead")
    writer = bk.logs.open_writer("read-ahead")
    writer.append_many([b"row-%d" % i for i in range(ROWS)])
    writer.close()
    return Options.parse({"metadata": spark_cluster.metadata, "log": "read-ahead"})


def partitions(opts: Options) -> list[reading.EntryRange]:
    bk = client_for(opts)
    parts: list[reading.EntryRange] = bk.run(reading.plan_logs, bk.client, opts)
    return parts


def test_a_partition_reads_in_order_one_chunk_ahead(log_opts: Options, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "CHUNK_ENTRIES", 700)
    (part,) = partitions(log_opts)
    batches = list(reading.read_partition(log_opts, part))
    assert [b.num_rows for b in batches] == [700] * 7 + [100]
    assert [p for b in batches for p in b.column("payload").to_pylist()] == [b"row-%d" % i for i in range(ROWS)]


def test_a_read_ahead_error_surfaces_where_its_chunk_is_consumed(log_opts: Options, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "CHUNK_ENTRIES", 1000)
    real = ReadHandle.read_block

    async def gone_from_2000(self: ReadHandle, first: int, last: int) -> EntryBlock:
        if first >= 2000:
            raise NoSuchLedgerError(self.ledger_id, "deleted")
        return await real(self, first, last)

    monkeypatch.setattr(ReadHandle, "read_block", gone_from_2000)
    (part,) = partitions(log_opts)
    batches = reading.read_partition(log_opts, part)
    assert next(batches).num_rows == 1000
    assert next(batches).num_rows == 1000  # its read ahead of 2000.. failed meanwhile: not yet said
    with pytest.raises(PositionTrimmedError, match=r"entries 2000\.\.2999 are gone"):
        next(batches)


def test_a_task_that_stops_early_cancels_its_read_ahead(log_opts: Options, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "CHUNK_ENTRIES", 1000)
    real = ReadHandle.read_block
    cancelled: list[int] = []

    async def stuck_from_1000(self: ReadHandle, first: int, last: int) -> EntryBlock:
        if first >= 1000:
            try:
                await trio.sleep_forever()
            finally:
                cancelled.append(first)
        return await real(self, first, last)

    monkeypatch.setattr(ReadHandle, "read_block", stuck_from_1000)
    (part,) = partitions(log_opts)
    batches = reading.read_partition(log_opts, part)
    assert next(batches).num_rows == 1000
    batches.close()  # as Spark does when a limit is reached
    deadline = time.monotonic() + 10
    while not cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cancelled == [1000]
    bk = client_for(log_opts)
    assert bk.alive and bk.run(trio.sleep, 0) is None


def test_run_ahead_gives_the_value_or_the_error(bk: BlockingClient) -> None:
    async def value(x: int) -> int:
        await trio.sleep(0.01)
        return x * 2

    async def fails() -> Any:
        raise bkframe.NoSuchLogError("nope")

    assert bk.run_ahead(value, 21).result() == 42
    with pytest.raises(bkframe.NoSuchLogError, match="nope"):
        bk.run_ahead(fails).result()
