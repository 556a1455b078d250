"""Log records with keys, timestamps and properties, on three real bookie processes: written
one by one and in batches across rollovers, read back by every reader, found by time
without reading the segments before, kept by retention by their own times, and segments
written before records had envelopes still read."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import trio

import bkframe
from bkframe import BadRecordError, Client, Position, Record
from bkframe.testing.cluster import Cluster

DAY_MS = 86_400_000


async def _entries_read(client: Client, cluster: Cluster) -> int:
    total = 0
    for b in cluster.bookies:
        info = await (await client.pool.get(b.bookie_id)).info()
        total += info["counters"]["entries_read"]
    return total


async def test_keys_timestamps_and_properties_come_back_from_every_reader(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        await logs.create("keyed", rollover_entries=7)
        writer = await logs.open_writer("keyed")
        before = int(time.time() * 1000)
        one = await writer.append(b"first", key=b"k1", properties={"source": "test"})
        two = await writer.append(b"second", timestamp=1_000)  # an event time, long ago
        # A batch: plain payloads and records mixed, straddling rollovers (7 entries a segment).
        batch = [Record(b"r%d" % i, key=b"k%d" % (i % 3), timestamp=2_000 + i) if i % 2 else b"p%d" % i for i in range(20)]
        positions = await writer.append_many(batch)
        await writer.close()
        after = int(time.time() * 1000)
        assert one == Position(0, 0) and two == Position(0, 1)
        # Positions run on without a gap across the segments the batch spans.
        expected = [Position(n // 7, n % 7) for n in range(2, 22)]
        assert positions == expected

        read = await (await logs.reader("keyed")).read()
        assert [e.position for e in read] == [one, two, *positions]
        first, second, *rest = read
        assert (first.payload, first.key, first.event_time) == (b"first", b"k1", False)
        assert dict(first.properties) == {"source": "test"}
        assert first.timestamp is not None and before <= first.timestamp <= after
        assert (second.payload, second.key, second.timestamp, second.event_time) == (b"second", None, 1_000, True)
        for i, e in enumerate(rest):
            if i % 2:
                assert (e.payload, e.key, e.timestamp, e.event_time) == (b"r%d" % i, b"k%d" % (i % 3), 2_000 + i, True)
            else:
                assert e.payload == b"p%d" % i and e.key is None and not e.event_time
                assert e.timestamp is not None and before <= e.timestamp <= after
            assert dict(e.properties) == {}

        # The tail and the blocking facade decode the same.
        tailed: list[bkframe.LogEntry] = []
        with trio.move_on_after(10):
            async for e in (await logs.reader("keyed")).tail("earliest", poll_timeout_s=0.2):
                tailed.append(e)
                if len(tailed) == len(read):
                    break
        assert tailed == read

        # Closed segments know the times of their records.
        md = await logs.metadata("keyed")
        seg0 = md.segments[0]
        assert seg0.enveloped and seg0.min_ts == 1_000 and before <= seg0.max_ts <= after
        assert all(s.enveloped and s.max_ts >= s.min_ts >= 1_000 for s in md.segments if s.closed)


def test_the_blocking_writer_takes_records_too(shared_cluster: Cluster) -> None:
    with bkframe.connect(shared_cluster.metadata) as bk:
        bk.logs.create("blocking-keyed")
        with bk.logs.open_writer("blocking-keyed") as w:
            w.append(b"a", key=b"x", timestamp=5, properties={"p": "q"})
            w.append_many([Record(b"b", key=b"y"), b"c"])
        got = bk.logs.reader("blocking-keyed").read()
        assert [(e.payload, e.key) for e in got] == [(b"a", b"x"), (b"b", b"y"), (b"c", None)]
        assert got[0].timestamp == 5 and dict(got[0].properties) == {"p": "q"}


async def test_a_seek_by_time_reads_only_the_segment_it_lands_in(shared_cluster: Cluster) -> None:
    # The open segment's LAC reaches its bookies by itself once the writer pauses.
    async with bkframe.open_client(shared_cluster.metadata, explicit_lac_interval_s=0.05) as client:
        logs = client.logs
        await logs.create("timed", rollover_entries=100)
        writer = await logs.open_writer("timed")
        # 5 closed segments of 100 records each, event times 0, 10, 20, ... ms (+ a base).
        base = 1_700_000_000_000
        await writer.append_many([Record(b"%d" % i, timestamp=base + 10 * i) for i in range(500)])
        await writer.roll()
        # An open segment: 30 more, then its ledger's LAC covers them.
        await writer.append_many([Record(b"%d" % i, timestamp=base + 10 * i) for i in range(500, 530)])
        await writer.flush()
        reader = await logs.reader("timed")
        with trio.fail_after(10):
            while (end := await reader.end()) != Position(5, 30):
                await trio.sleep(0.05)

        async def seek(t: int) -> tuple[Position, int]:
            read_before = await _entries_read(client, shared_cluster)
            found = await reader.position_at(t)
            return found, await _entries_read(client, shared_cluster) - read_before

        def at(i: int) -> Position:
            return Position(i // 100, i % 100)

        # Exactly on a record, between two, before all, in the open segment, after all.
        assert (await seek(base + 10 * 345))[0] == at(345)
        assert (await seek(base + 10 * 345 + 3))[0] == at(346)
        assert (await seek(base - 5))[0] == at(0)
        assert (await seek(base + 10 * 512))[0] == at(512)
        assert (await seek(base + 10 * 10_000))[0] == end
        # Only the segment the time falls in is read, by bisection: a handful of entries
        # (never the 300 before it), on each of the bookies asked.
        found, reads = await seek(base + 10 * 377)
        assert found == at(377) and 0 < reads <= 2 * 10
        # A segment that starts at or after the time is not read at all.
        found, reads = await seek(base + 10 * 300)
        assert found == at(300) and reads == 0

        # Where a position goes, a time goes: readers, cursors.
        since = datetime.fromtimestamp((base + 10 * 250) / 1000, UTC)
        got = await reader.read(since, Position(2, 53))
        assert [e.payload for e in got] == [b"250", b"251", b"252"]
        cursor = await logs.create_cursor("timed", "c", since)
        assert cursor.position == at(250)
        moved = await logs.move_cursor("timed", "c", since + timedelta(milliseconds=1000))
        assert moved.position == at(350)
        await writer.close()


async def test_retention_by_age_goes_by_the_records_times(shared_cluster: Cluster) -> None:
    """Kafka's retention.ms: a segment goes once its newest record is older than retention,
    however recently it was written (a backfill of old events goes soon)."""
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        await logs.create("aging", retention_s=3600.0)
        writer = await logs.open_writer("aging")
        now = int(time.time() * 1000)
        await writer.append_many([Record(b"old", timestamp=now - 2 * DAY_MS)] * 3)
        await writer.roll()
        await writer.append_many([Record(b"recent", timestamp=now - 60_000)] * 3)
        await writer.roll()
        await writer.append(b"now")
        await writer.close()
        # The writer applies retention after each rollover, a trim any time: either way
        # the segment of old events is gone, the one of recent events is kept.
        await logs.trim("aging", retention=True)
        md = await logs.metadata("aging")
        assert md.start == Position(1, 0) and md.trimmed_entries == 3
        left = await (await logs.reader("aging")).read()
        assert [e.payload for e in left] == [b"recent"] * 3 + [b"now"]


async def test_raw_segments_and_bad_records(shared_cluster: Cluster) -> None:
    """A ledger of plain payloads committed to a log reads as before (no key, no time); a
    ledger that claims envelopes and holds garbage fails the read naming the entry."""
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        await logs.create("mixed-formats")
        raw = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
        await raw.append_many([b"plain-0", b"plain-1"])
        await raw.close()
        await logs.commit_ledgers("mixed-formats", [raw.ledger_id], "raw")
        enveloped = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, custom=dict(bkframe.ENVELOPE_CUSTOM))
        await enveloped.append_many([bkframe.encode_record(Record(b"rec", key=b"k")), b"bad"])
        await enveloped.close()
        await logs.commit_ledgers("mixed-formats", [enveloped.ledger_id], "enveloped", time_bounds={enveloped.ledger_id: (1, 2)})
        md = await logs.metadata("mixed-formats")
        assert [(s.enveloped, s.min_ts, s.max_ts) for s in md.segments] == [(False, -1, -1), (True, 1, 2)]
        reader = await logs.reader("mixed-formats")
        # A snapshot carries each segment's time range and average entry size (Spark prunes and sizes by them).
        parts = await reader.snapshot()
        assert [(r.min_ts, r.max_ts, r.entry_size) for r in parts] == [(-1, -1, 7), (1, 2, (17 + 3) // 2)]
        got = await reader.read(Position(0, 0), Position(1, 1))
        assert [(e.payload, e.key) for e in got] == [(b"plain-0", None), (b"plain-1", None), (b"rec", b"k")]
        assert got[0].timestamp is None and got[2].timestamp is not None
        with pytest.raises(BadRecordError, match=r"log 'mixed-formats': entry 1:1: .*shorter than its 9-byte envelope"):
            await reader.read(Position(1, 0))
        # A raw segment counts as of its close: a time before it lands on its start.
        assert await reader.position_at(0) == Position(0, 0)
        assert md.segments[0].latest_ms() == int(md.segments[0].closed_at * 1000)
