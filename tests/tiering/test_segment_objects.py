"""Closed log segments as Parquet objects in a filesystem tier, on three real bookies.

One log is written across three enveloped segments (keys, event and publish times,
properties) and one raw one (a plain ledger committed to it); each closed segment is written
to a directory tier, verified, and read back -- by this package's readers and by Parquet
readers that know nothing of bkframe -- and compared with what the log reader reads from
the bookies. Then the objects are damaged (truncated, one byte flipped, swapped) and every
reader refuses them.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import attrs
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trio

import bkframe
from bkframe import Position, Record
from bkframe.client.logs.model import LogEntry, Segment
from bkframe.core.interfaces.tier import ObjectInfo
from bkframe.errors import TierError
from bkframe.plugins.tier_filesystem import FilesystemTier
from bkframe.testing.backends import on_both_backends
from bkframe.testing.cluster import Cluster
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.footer import TAIL_BYTES
from bkframe.tiering.keys import SegmentKey, parse_segment_key
from bkframe.tiering.object_format import CorruptObjectError, ObjectOptions, ObjectSummary
from bkframe.tiering.segment_reader import AsyncSegmentObjectReader, SegmentObjectReader, connector_columns
from bkframe.tiering.segment_writer import SegmentNotClosedError, write_segment_object
from bkframe.tiering.verify import verify_object

PASSWORD = b"tiering"
#: Small row groups, so that each segment's object has several.
OPTIONS = ObjectOptions(row_group_bytes=48 << 10)
BASE_MS = 1_764_140_400_000


@attrs.frozen
class Written:
    """A segment as the bookies gave it, and its object."""

    segment: Segment
    hot_table: pa.Table
    hot_entries: list[LogEntry]
    summary: ObjectSummary


@attrs.frozen
class Offloaded:
    uri: str
    log: str
    log_uid: str
    tier_root: Path
    spool: Path
    segments: list[Written]


def records(count: int, seed: int) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        payload = rng.randbytes(rng.randrange(100, 900))
        key = b"user-%d" % (i % 7) if i % 3 else None
        # Event times a second apart, every tenth 40 s back (out of order, as event times are).
        timestamp = BASE_MS + 1000 * (i - 40 * (i % 10 == 0)) + seed * 10_000_000
        properties = {"source": "web", "n": str(i)} if i % 5 == 0 else None
        out.append(Record(payload, key, timestamp, properties))
    return out


async def _offload(uri: str, tier_root: Path, spool: Path) -> Offloaded:
    name = f"tiering-{uuid.uuid4().hex[:8]}"
    async with bkframe.open_client(uri) as bk:
        await bk.logs.create(name, password=PASSWORD, rollover_entries=600)
        async with await bk.logs.open_writer(name, password=PASSWORD) as writer:
            await writer.append_many(records(1200, 1))  # segments 0 and 1: event times
            # Segment 2: publish times, a key and properties now and then.
            await writer.append_many([b"plain %d" % i if i % 50 else Record(b"x", key=b"", properties={"k": ""})
                                      for i in range(300)])
        raw = await bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        await raw.append_many(b"raw payload %d " % i * (i % 9 + 1) for i in range(400))
        await raw.close()
        await bk.logs.commit_ledgers(name, [raw.ledger_id], "raw", password=PASSWORD)
        reader = await bk.logs.reader(name, password=PASSWORD)
        segments = [s for s in (await reader.refresh()).segments if s.closed]
        assert [s.enveloped for s in segments] == [True, True, True, False]
        tier = AsyncTier(FilesystemTier(tier_root, create=True))
        out = []
        for seg in segments:
            end = Position(seg.number, seg.last_entry_id + 1)
            hot_table = await reader.to_arrow(seg.first(), end)
            hot_entries = await reader.read(seg.first(), end)
            handle = await bk.open_ledger(seg.ledger_id, password=PASSWORD, recovery=False)
            summary = await write_segment_object(
                handle, tier, log=name, log_uid=reader.metadata.uid, segment=seg, spool_dir=spool, options=OPTIONS
            )
            out.append(Written(seg, hot_table, hot_entries, summary))
        return Offloaded(uri, name, reader.metadata.uid, tier_root, spool, out)


@pytest.fixture(scope="module")
def offloaded(shared_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Offloaded]:
    root = tmp_path_factory.mktemp("tiering")
    (root / "spool").mkdir()
    yield trio.run(_offload, shared_cluster.metadata, root / "tier", root / "spool")


def tier_of(offloaded: Offloaded) -> FilesystemTier:
    return FilesystemTier(offloaded.tier_root)


async def test_each_closed_segment_is_written_verified_and_read_back_byte_for_byte(offloaded: Offloaded) -> None:
    tier = AsyncTier(tier_of(offloaded))
    assert list(offloaded.spool.iterdir()) == []  # spool files never outlive a write
    for w in offloaded.segments:
        seg, summary = w.segment, w.summary
        assert parse_segment_key(summary.key) == SegmentKey(offloaded.log_uid, seg.number, seg.ledger_id)
        assert (summary.entries, summary.content.last_entry_id, summary.content.entry_bytes) == (
            seg.entries, seg.last_entry_id, seg.length,
        )
        assert summary.row_groups >= (3 if seg.number < 2 else 1)
        verified = await verify_object(tier, summary.key, summary.content, size=summary.size,
                                       object_crc32c=summary.object_crc32c)
        # Ranged gets only: the tail, then one per row group.
        assert (verified.gets, verified.row_groups) == (1 + summary.row_groups, summary.row_groups)
        # Our readers: the connector's columns and the log's entries, exactly as from the bookies.
        reader = SegmentObjectReader(tier.tier, summary.key)
        assert reader.read_table(0, seg.last_entry_id).equals(w.hot_table.replace_schema_metadata(None))
        assert reader.entries(0, seg.last_entry_id) == w.hot_entries
        assert await AsyncSegmentObjectReader(tier, summary.key).entries(0, seg.last_entry_id) == w.hot_entries
        # Parquet readers that know nothing of bkframe read the connector's rows from the file.
        path = offloaded.tier_root / summary.key
        assert pq.read_metadata(path).metadata[b"bkframe.log_uid"] == offloaded.log_uid.encode()
        plain = pq.read_table(path, columns=connector_columns())
        assert plain.replace_schema_metadata(None).equals(w.hot_table.replace_schema_metadata(None))
        hot = w.hot_table  # noqa: F841 - DuckDB finds it by name
        assert duckdb.sql(
            f"select count(*) from read_parquet('{path}') p join hot using (position) "
            "where p.payload = hot.payload and p.key is not distinct from hot.key "
            "and p.timestamp is not distinct from hot.timestamp"
        ).fetchall() == [(seg.entries,)]
    raw = offloaded.segments[-1]
    assert raw.hot_entries[0].timestamp is None and raw.summary.content.min_ts == -1
    assert pq.read_table(offloaded.tier_root / raw.summary.key, columns=["key", "flags"]).column("flags").null_count == 400


async def test_a_read_fetches_the_footer_and_only_the_row_groups_it_needs(offloaded: Offloaded) -> None:
    w = offloaded.segments[1]
    tier = tier_of(offloaded)
    reader = SegmentObjectReader(tier, w.summary.key, size=w.summary.size)
    footer = reader.footer()
    assert reader.fetches.requests == 1  # the tail holds the whole footer
    group = footer.groups[2]
    mid = (group.first_entry_id + group.last_entry_id) // 2
    assert reader.entries(mid, mid) == [w.hot_entries[mid]]
    # Exactly the tail and that row group's bytes: a fraction of the object.
    assert reader.fetches.requests == 2
    assert reader.fetches.bytes == min(TAIL_BYTES, w.summary.size) + group.size
    assert group.size < w.summary.size / 4
    # The next entries of that row group come from the one decoded (a tail reads on so).
    assert reader.entries(mid + 1, group.last_entry_id) == w.hot_entries[mid + 1 : group.last_entry_id + 1]
    assert reader.fetches.requests == 2
    # A range across a row-group boundary: the next group too, exactly the rows asked for.
    first, last = group.last_entry_id - 3, group.last_entry_id + 3
    assert reader.entries(first, last) == w.hot_entries[first : last + 1]
    assert reader.fetches.requests == 3
    # A seek by time reads one column chunk of one row group.
    before = reader.fetches.bytes
    times = [e.timestamp for e in w.hot_entries]
    for ms in (times[0] - 1, times[333], times[333] + 1, min(times[300:]), max(times) + 1):
        expected = next((i for i, t in enumerate(times) if t is not None and t >= ms), None)
        assert reader.entry_at_time(ms) == expected, ms
    assert reader.fetches.bytes - before < 5 * (8 << 10)
    # The footer says where an entry and a time are, without a read.
    assert [g.index for g in footer.groups_for(mid, mid)] == [2]
    assert footer.content.min_ts == min(times) and footer.content.max_ts == max(times)


async def test_the_blocking_and_async_readers_run_one_plan_alike(offloaded: Offloaded) -> None:
    """Both readers drive the same SegmentPlan: on one object, the same reads give the same
    rows from the same fetches, and the count is the tier's own."""
    w = offloaded.segments[1]
    tier = AsyncTier(tier_of(offloaded))
    blocking = SegmentObjectReader(tier_of(offloaded), w.summary.key)  # no size: a head first
    in_loop = AsyncSegmentObjectReader(tier, w.summary.key)
    footer = blocking.footer()
    assert (await in_loop.footer()).groups == footer.groups
    assert blocking.fetches == in_loop.fetches and in_loop.fetches.requests == tier.gets
    group = footer.groups[1]
    mid = (group.first_entry_id + group.last_entry_id) // 2
    ranges = [(mid, mid), (mid + 1, group.last_entry_id), (group.last_entry_id - 3, group.last_entry_id + 3)]
    for first, last in [*ranges, (0, w.segment.last_entry_id)]:
        assert blocking.read_table(first, last).equals(await in_loop.read_table(first, last))
        assert blocking.entries(first, last) == await in_loop.entries(first, last) == w.hot_entries[first : last + 1]
        assert blocking.fetches == in_loop.fetches
    for first, last in ranges:
        columns = ["entry_id", "payload"]
        expected = list(blocking.batches(first, last, columns))
        assert [b async for b in in_loop.batches(first, last, columns)] == expected and len(expected) >= 1
        assert blocking.fetches == in_loop.fetches
    times = [e.timestamp for e in w.hot_entries if e.timestamp is not None]
    for ms in (min(times) - 1, times[333], max(times) + 1):
        assert blocking.entry_at_time(ms) == await in_loop.entry_at_time(ms)
    assert blocking.fetches == in_loop.fetches and in_loop.fetches.requests == tier.gets
    assert blocking.fetches.requests > 1 + len(ranges)


def damaged(offloaded: Offloaded, root: Path, change: bytes) -> tuple[FilesystemTier, str]:
    """A tier holding ``change`` under segment 0's key."""
    tier = FilesystemTier(root, create=True)
    key = offloaded.segments[0].summary.key
    tier.put(key, change)
    return tier, key


async def test_truncated_flipped_or_swapped_objects_are_never_returned_as_data(offloaded: Offloaded, tmp_path: Path) -> None:
    w = offloaded.segments[0]
    summary = w.summary
    good = (offloaded.tier_root / summary.key).read_bytes()
    footer = SegmentObjectReader(tier_of(offloaded), summary.key).footer()
    second = footer.groups[1]
    payload_lo, payload_hi = second.columns["payload"]
    flipped = bytearray(good)
    flipped[(payload_lo + payload_hi) // 2] ^= 0x20
    cases = {
        "truncated": (good[: len(good) - 100], "truncated"),
        "flipped": (bytes(flipped), "CRC checksum verification failed"),
        "swapped": ((offloaded.tier_root / offloaded.segments[1].summary.key).read_bytes(), "its footer says segment 1"),
    }
    for name, (data, why) in cases.items():
        tier, key = damaged(offloaded, tmp_path / name, data)
        with pytest.raises(CorruptObjectError, match=why) as caught:
            await verify_object(AsyncTier(tier), key, summary.content)
        assert key in str(caught.value)
        # Given the size written, a short object is refused before its footer is read.
        if name == "truncated":
            with pytest.raises(CorruptObjectError, match=r"bytes; .* were written"):
                await verify_object(AsyncTier(tier), key, summary.content, size=summary.size)
    # A reader refuses the flipped row group, and reads the others, which it needs alone.
    reader = SegmentObjectReader(FilesystemTier(tmp_path / "flipped"), summary.key)
    with pytest.raises(CorruptObjectError, match=f"{summary.key}.*row group 1"):
        reader.entries(second.first_entry_id, second.first_entry_id)
    assert reader.entries(0, 2) == w.hot_entries[:3]
    with pytest.raises(CorruptObjectError, match="magic"):
        SegmentObjectReader(FilesystemTier(tmp_path / "truncated"), summary.key).entries(0, 0)


async def test_an_object_left_by_an_earlier_offload_is_adopted_only_if_it_holds_the_segment(
    offloaded: Offloaded, shared_cluster: Cluster, tmp_path: Path
) -> None:
    w0, w1 = offloaded.segments[0], offloaded.segments[1]
    async with bkframe.open_client(offloaded.uri) as bk:
        handle = await bk.open_ledger(w0.segment.ledger_id, password=PASSWORD, recovery=False)
        write = dict(log=offloaded.log, log_uid=offloaded.log_uid, segment=w0.segment, spool_dir=tmp_path, options=OPTIONS)
        # The same object again (an offload that died before its commit, retried): adopted.
        again = await write_segment_object(handle, AsyncTier(tier_of(offloaded)), **write)
        assert again == w0.summary
        # Another segment's object under this key: refused, naming it -- by its footer's bytes,
        # before they are parsed (a damaged footer can abort the process inside pyarrow).
        tier, key = damaged(offloaded, tmp_path / "other", (offloaded.tier_root / w1.summary.key).read_bytes())
        with pytest.raises(CorruptObjectError, match=f"{key}.*footer's CRC32C is .* was recorded"):
            await write_segment_object(handle, AsyncTier(tier), **write)
        # An open segment is not written.
        with pytest.raises(SegmentNotClosedError):
            await write_segment_object(handle, AsyncTier(tier), **{**write, "segment": attrs.evolve(w0.segment, closed=False)})
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == []


class _StuckTier:
    """A tier whose calls hang for a second (a store that stopped answering)."""

    uri = "stuck://"

    def __init__(self) -> None:
        self.calls = 0

    def head(self, key: str) -> ObjectInfo | None:
        self.calls += 1
        time.sleep(1.0)
        return None


@on_both_backends
async def test_a_tier_call_that_hangs_fails_at_its_deadline() -> None:
    stuck = _StuckTier()
    tier = AsyncTier(stuck, timeout_s=0.2)  # type: ignore[arg-type] - a tier of one method is enough here
    start = anyio.current_time()
    with pytest.raises(TierError, match=r"stuck://: head 'k' did not finish in 0.2 s \(abandoned\)"):
        await tier.head("k")
    assert anyio.current_time() - start < 0.9 and stuck.calls == 1
