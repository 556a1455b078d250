"""A log of hundreds of segments (dozens of chunks) keeps a bounded log record (older segments move to chunk
records) and reads back every entry in order; seeking back, info, trim and delete work
across chunks. Real bookies (the shared sqlite cluster), one-copy segments to be quick."""

from __future__ import annotations

import trio

import bkframe
from bkframe import Position
from bkframe.client.logs import chunks
from bkframe.testing.cluster import Cluster

COMMITTED = 400
PER_CHUNK = 8
WRITTEN = 60


async def _ledger(client: bkframe.Client, i: int) -> int:
    handle = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="VD_JOURNAL")
    handle.append_async(b"c-%05d" % i)
    await handle.close()
    return handle.ledger_id


async def test_hundreds_of_segments_keep_the_record_bounded_and_read_back_in_order(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        await logs.create(
            "chunked", ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=3, segments_per_chunk=PER_CHUNK
        )
        ids: list[int] = [0] * COMMITTED
        limit = trio.CapacityLimiter(16)

        async def make(i: int) -> None:
            async with limit:
                ids[i] = await _ledger(client, i)

        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                for i in range(COMMITTED):
                    nursery.start_soon(make, i)
            for first in range(0, COMMITTED, 100):
                await logs.commit_ledgers("chunked", ids[first : first + 100], f"load-{first}")
            # A writer rolling over every 3 entries stores the record at each rollover: spilling too.
            async with await logs.open_writer("chunked") as writer:
                for i in range(WRITTEN):
                    writer.append_async(b"w-%05d" % i)
        expected = [b"c-%05d" % i for i in range(COMMITTED)] + [b"w-%05d" % i for i in range(WRITTEN)]

        md = await logs.metadata("chunked")
        total = COMMITTED + WRITTEN // 3
        assert md.segment_count == total and len(md.chunks) >= total // PER_CHUNK - 2
        assert len(md.segments) < 2 * PER_CHUNK + 3
        # Unbounded, the record would hold ~70 bytes per segment (~30 KB here); bounded, it
        # holds a few segments and a short summary per chunk.
        assert len(md.serialize()) < 10_000, len(md.serialize())

        with trio.fail_after(120):
            reader = await logs.reader("chunked")
            entries = await reader.read("earliest")
            assert [e.payload for e in entries] == expected
            positions = [e.position for e in entries]
            assert positions == sorted(positions) and len(set(positions)) == len(positions)
            # Seeking back into an old chunk, by a fresh client (nothing cached).
            async with bkframe.open_client(shared_cluster.metadata) as other:
                back = await other.logs.reader("chunked")
                at = entries[277].position
                assert [e.payload for e in await back.read(at, max_entries=5)] == expected[277:282]
                tailed = []
                async for chunk in back.tail_chunks(entries[100].position):
                    tailed.extend(chunk)
                    if len(tailed) >= 60:
                        break
                assert [e.payload for e in tailed[:60]] == expected[100:160]
                info = await other.logs.info("chunked")
                assert len(info.segments) == total and sum(info.entries.values()) == len(expected)
                assert info.end == await back.end() == entries[-1].position.next()

            # A trim ending inside a chunk: whole chunks and part of one go, their ledgers too.
            cut = entries[133].position
            result = await logs.trim("chunked", before=cut)
            assert [s.number for s in result.removed] == list(range(cut.segment)) and result.start == cut
            for gone in (ids[0], ids[132]):
                try:
                    await client.ledger_metadata(gone)
                    raise AssertionError(f"ledger {gone} of a trimmed segment is still there")
                except bkframe.NoSuchLedgerError:
                    pass
            md = await logs.metadata("chunked")
            assert md.chunks[0].first == cut.segment and md.segment_count == total - cut.segment
            stored = await client.metadata.list_cursors("chunked")
            assert chunks.record_name(0) not in stored and await logs.cursors("chunked") == []
            again = await (await logs.reader("chunked")).read("earliest")
            assert [e.payload for e in again] == expected[133:]

            await logs.delete("chunked")
            assert await client.metadata.list_cursors("chunked") == {}
            for gone in (ids[300], ids[-1]):
                try:
                    await client.ledger_metadata(gone)
                    raise AssertionError(f"ledger {gone} of a deleted log is still there")
                except bkframe.NoSuchLedgerError:
                    pass


def test_a_chunk_summary_lets_a_trim_go_exactly_as_far_as_its_segments() -> None:
    """The pure part: spilling keeps the record's closed prefix under twice the chunk size,
    and a chunk's stand-in segment passes a position exactly when its last segment does."""
    from bkframe.client.logs.model import LogMetadata, LogSettings

    record = LogMetadata("x", LogSettings(segments_per_chunk=10), uid="u")
    for i in range(95):
        record = record.add_segment(1000 + i, now=float(i), closed=True, last_entry_id=4, length=50)
    record = record.add_segment(2000, now=95.0)  # open
    spilled, moved = chunks.spill(record)
    assert [c.key for c, _ in moved] == [0, 10, 20, 30, 40, 50, 60, 70]
    assert [s.number for s in spilled.segments] == list(range(80, 96))
    assert spilled.segment_count == record.segment_count and spilled.length == record.length
    assert spilled.start == record.start == Position(0, 0)
    chunk = spilled.chunks[1]
    assert (chunk.first, chunk.last, chunk.entries, chunk.length, chunk.closed_at) == (10, 19, 50, 500, 19.0)
    assert chunk.as_segment().passed_by(Position(19, 5)) and not chunk.as_segment().passed_by(Position(19, 4))
    assert chunks.spill(spilled) == (spilled, [])
    assert LogMetadata.deserialize(spilled.serialize(), 3).chunks == spilled.chunks
