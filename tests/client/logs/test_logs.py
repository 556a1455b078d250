"""Named logs on real bookie processes, on each shared metadata store (sqlite, ZooKeeper and
etcd as real servers), each under asyncio and trio: rollover under load, fencing, a killed
writer, commits, retention. The two loops' runs share the module's cluster, so each names its
logs after its loop (``per_backend``)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import deque
from pathlib import Path

import anyio
import attrs
import pytest

import bkframe
from bkframe import Logs, LogWriter, PendingLogAppend, Position
from bkframe.testing.backends import on_both_backends, per_backend
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD, payload


@on_both_backends
async def test_many_rollovers_while_appending_and_tailing(log_cluster: Cluster) -> None:
    """The tail sees every entry once, in order, with the positions the appends returned,
    while segments roll over every 50 entries under a pipelined writer."""
    n = 1500
    async with bkframe.open_client(log_cluster.metadata) as client:
        logs = Logs(client)
        await logs.create(per_backend("roll"), rollover_entries=50, ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        writer = await logs.open_writer(per_backend("roll"), password=PASSWORD)
        reader = await logs.reader(per_backend("roll"), password=PASSWORD)
        tailed: list[bkframe.LogEntry] = []
        acked: list[Position] = []

        async def tail() -> None:
            async for entry in reader.tail("earliest", poll_timeout_s=0.5):
                tailed.append(entry)
                if len(tailed) == n:
                    return

        with anyio.fail_after(120):
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(tail)
                window: deque[PendingLogAppend] = deque()
                for i in range(n):
                    window.append(writer.append_async(payload("e", i)))
                    if len(window) >= 32:
                        acked.append(await window.popleft().wait())
                while window:
                    acked.append(await window.popleft().wait())
                await writer.close()  # the close confirms the last entry to readers
        assert [e.payload for e in tailed] == [payload("e", i) for i in range(n)]
        assert [e.position for e in tailed] == acked
        md = await logs.metadata(per_backend("roll"))
        assert len(md.segments) >= 10, [s.entries for s in md.segments]
        assert all(s.closed and s.entries >= 50 for s in md.segments[:-1])
        assert sum(s.entries for s in md.segments) == n
        assert md.writer == "" and md.spares == () and md.garbage == ()
        # A reader made now reads the same, and positions are stable: a range reads back.
        again = await (await logs.reader(per_backend("roll"), password=PASSWORD)).read()
        assert [(e.position, e.payload) for e in again] == [(e.position, e.payload) for e in tailed]
        mid = tailed[700].position
        part = await reader.read(mid, tailed[760].position)
        assert [e.payload for e in part] == [payload("e", i) for i in range(700, 760)]


@on_both_backends
async def test_two_writers_race_to_open_exactly_one_wins(log_cluster: Cluster) -> None:
    """While a first writer appends, two more clients open the log at once: afterwards
    exactly one writer can append, the others get LogFencedError, and every position
    any of them had acknowledged reads back with its payload."""
    uri = log_cluster.metadata
    async with bkframe.open_client(uri) as c1, bkframe.open_client(uri) as c2, bkframe.open_client(uri) as c3:
        logs = Logs(c1)
        await logs.create(per_backend("race"), rollover_entries=40)
        first = await logs.open_writer(per_backend("race"))
        acked: dict[Position, bytes] = {}
        for i in range(60):
            acked[await first.append(payload("first", i))] = payload("first", i)
        opened: dict[str, LogWriter] = {}
        refused: list[str] = []

        async def open_one(label: str, client: bkframe.Client) -> None:
            try:
                opened[label] = await Logs(client).open_writer(per_backend("race"))
            except bkframe.LogFencedError:
                refused.append(label)

        async def keep_appending() -> None:
            i = 60
            with pytest.raises(bkframe.LogFencedError):
                while True:
                    acked[await first.append(payload("first", i))] = payload("first", i)
                    i += 1

        with anyio.fail_after(60):
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(keep_appending)
                nursery.start_soon(open_one, "b", c2)
                nursery.start_soon(open_one, "c", c3)
        assert len(opened) + len(refused) == 2 and opened
        working = []
        for label, writer in opened.items():
            try:
                for i in range(20):
                    acked[await writer.append(payload(label, i))] = payload(label, i)
                working.append(label)
            except bkframe.LogFencedError:
                pass
        assert len(working) == 1, (working, refused)
        with pytest.raises(bkframe.LogFencedError):
            await first.append(b"too late")
        await opened[working[0]].close()
        entries = await (await logs.reader(per_backend("race"))).read()
        got = {e.position: e.payload for e in entries}
        assert {p: got.get(p) for p in acked} == acked
        assert [e.position for e in entries] == sorted(got)


def _run_writer_then_kill(uri: str, name: str, acks: int) -> list[tuple[str, str]]:
    script = Path(__file__).with_name("log_writer_process.py")
    proc = subprocess.Popen([sys.executable, str(script), uri, name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        acked = []
        for _ in range(acks):
            position, text = proc.stdout.readline().split()
            acked.append((position, text))
        return acked
    finally:
        proc.kill()
        proc.wait()


@on_both_backends
async def test_writer_process_killed_mid_stream_next_writer_recovers(log_cluster: Cluster) -> None:
    """A writer process is SIGKILLed while appending across rollovers; the next writer's
    open recovers its open segments: every acknowledged position reads back, the log holds
    exactly the first entries the dead writer appended (no gap), and the dead writer's
    spare ledger is deleted."""
    uri = log_cluster.metadata
    async with bkframe.open_client(uri) as client:
        await Logs(client).create(per_backend("killed"), rollover_entries=60)
    killed = per_backend("killed")
    acked = await anyio.to_thread.run_sync(lambda: _run_writer_then_kill(uri, killed, 400))
    async with bkframe.open_client(uri) as client:
        logs = Logs(client)
        before = await logs.metadata(per_backend("killed"))
        assert before.writer and before.open_segments(), "the killed writer left its segment open"
        writer = await logs.open_writer(per_backend("killed"))
        after = writer.metadata
        # Open now: only the new writer's segment (and the successor it reserved).
        assert min(s.number for s in after.segments if not s.closed) == writer.segment
        for ledger_id in before.spares:
            with pytest.raises(bkframe.NoSuchLedgerError):
                await client.ledger_metadata(ledger_id)
        entries = await (await logs.reader(per_backend("killed"))).read()
        got = {str(e.position): e.payload.decode() for e in entries}
        assert {p: got.get(p) for p, _ in acked} == dict(acked)
        assert [e.payload for e in entries] == [b"entry-%d" % i for i in range(len(entries))]
        # The new writer goes on after everything the old one left.
        position = await writer.append(b"after")
        assert position > entries[-1].position
        await writer.close()
        assert [e.payload for e in await (await logs.reader(per_backend("killed"))).read(position)] == [b"after"]


async def _closed_ledger(client: bkframe.Client, label: str, count: int, password: bytes = PASSWORD) -> int:
    writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=password)
    for i in range(count):
        writer.append_async(payload(label, i))
    await writer.close()
    return writer.ledger_id


@on_both_backends
async def test_commit_ledgers_once_per_token_and_concurrent_commits_both_land(log_cluster: Cluster) -> None:
    uri = log_cluster.metadata
    async with bkframe.open_client(uri) as client, bkframe.open_client(uri) as other:
        logs = Logs(client)
        await logs.create(per_backend("bulk"), password=PASSWORD)
        a, b, empty = (
            await _closed_ledger(client, "a", 30),
            await _closed_ledger(client, "b", 20),
            await _closed_ledger(client, "x", 0),
        )
        first = await logs.commit_ledgers(per_backend("bulk"), [a, b, empty], "job-1", password=PASSWORD)
        assert first.segments == (0, 1) and not first.replayed
        # Retried (the caller did not see the answer): a no-op that returns the first result.
        again = await logs.commit_ledgers(per_backend("bulk"), [a, b, empty], "job-1", password=PASSWORD)
        assert again == first and again.replayed
        md = await logs.metadata(per_backend("bulk"))
        assert [(s.number, s.ledger_id, s.entries) for s in md.segments] == [(0, a, 30), (1, b, 20)]
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.ledger_metadata(empty)  # an empty ledger becomes no segment
        # Two commits at once, from two clients: both land, each as consecutive segments.
        batches = {
            "job-2": [await _closed_ledger(client, "c", 5), await _closed_ledger(client, "d", 6)],
            "job-3": [await _closed_ledger(client, "e", 7), await _closed_ledger(client, "f", 8)],
        }
        results: dict[str, bkframe.CommitResult] = {}

        async def commit(token: str, c: bkframe.Client) -> None:
            results[token] = await Logs(c).commit_ledgers(per_backend("bulk"), batches[token], token, password=PASSWORD)

        async with anyio.create_task_group() as nursery:
            nursery.start_soon(commit, "job-2", client)
            nursery.start_soon(commit, "job-3", other)
        md = await logs.metadata(per_backend("bulk"))
        by_number = {s.number: s.ledger_id for s in md.segments}
        for token, ledgers in batches.items():
            segs = results[token].segments
            assert len(segs) == 2 and segs[1] == segs[0] + 1
            assert [by_number[n] for n in segs] == ledgers
        assert sorted(by_number) == [0, 1, 2, 3, 4, 5]
        entries = await (await logs.reader(per_backend("bulk"), password=PASSWORD)).read()
        assert len(entries) == 30 + 20 + 5 + 6 + 7 + 8
        # What cannot be committed says why.
        open_writer = await client.create_ledger(password=PASSWORD)
        await open_writer.append(b"x")
        with pytest.raises(bkframe.CommitError, match="only closed ledgers"):
            await logs.commit_ledgers(per_backend("bulk"), [open_writer.ledger_id], "job-4", password=PASSWORD)
        with pytest.raises(bkframe.CommitError, match="in the log already"):
            await logs.commit_ledgers(per_backend("bulk"), [a], "job-5", password=PASSWORD)
        other_pw = await _closed_ledger(client, "g", 1, password=b"other")
        with pytest.raises(bkframe.CommitError, match="another password"):
            await logs.commit_ledgers(per_backend("bulk"), [other_pw], "job-6", password=PASSWORD)


@on_both_backends
async def test_staged_ledgers_are_deleted_by_the_commit_that_leaves_them_out_or_a_discard(log_cluster: Cluster) -> None:
    """How a Spark write finds its own ledgers without listing the cluster's: each is staged
    in the log record when made; the token's commit deletes those it leaves out, a discard
    those of its group; staging after either is refused."""
    async with bkframe.open_client(log_cluster.metadata) as client:
        logs = Logs(client)
        await logs.create(per_backend("staging"), password=PASSWORD)
        kept, dropped, other_run, late = [await _closed_ledger(client, f"s{i}", 3) for i in range(4)]
        assert await logs.stage_ledger(per_backend("staging"), kept, "job", group="run-1", password=PASSWORD)
        assert await logs.stage_ledger(per_backend("staging"), dropped, "job", group="run-1", password=PASSWORD)
        assert await logs.stage_ledger(per_backend("staging"), other_run, "job", group="run-2", password=PASSWORD)
        assert (await logs.metadata(per_backend("staging"))).staged_ids() == {kept, dropped, other_run}
        assert await logs.discard_staged(per_backend("staging"), "run-2", password=PASSWORD) == [other_run]
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.ledger_metadata(other_run)
        assert not await logs.stage_ledger(per_backend("staging"), late, "job", group="run-2", password=PASSWORD)
        result = await logs.commit_ledgers(per_backend("staging"), [kept], "job", password=PASSWORD)
        md = await logs.metadata(per_backend("staging"))
        assert [s.ledger_id for s in md.segments] == [kept] and result.segments == (0,)
        assert md.staged == () and md.garbage == ()
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.ledger_metadata(dropped)
        assert not await logs.stage_ledger(per_backend("staging"), late, "job", group="run-3", password=PASSWORD)
        assert (await logs.metadata(per_backend("staging"))).staged == ()


@on_both_backends
async def test_retention_removes_only_what_every_cursor_passed(log_cluster: Cluster) -> None:
    async with bkframe.open_client(log_cluster.metadata) as client:
        logs = Logs(client)
        await logs.create(per_backend("kept"), rollover_entries=20, retention_bytes=1)  # retention wants it all gone
        await logs.create_cursor(per_backend("kept"), "slow")
        await logs.create_cursor(per_backend("kept"), "fast", "earliest")
        writer = await logs.open_writer(per_backend("kept"))
        for i in range(100):
            writer.append_async(payload("k", i))
        md = await writer.close()
        # The writer applies retention after each rollover: the cursors at 0:0 held it all.
        assert [s.entries for s in md.segments] == [20] * 5
        ledgers = [s.ledger_id for s in md.segments]
        # A bounded batch (a stream's maxEntriesPerTrigger) stops at the right position.
        bounded = await logs.reader(per_backend("kept"))
        assert await bounded.advance("earliest", 45) == Position(2, 5)
        assert await bounded.advance(Position(3, 10), 1000) == Position(4, 20) == await bounded.end()
        await logs.move_cursor(per_backend("kept"), "slow", Position(1, 5))
        await logs.move_cursor(per_backend("kept"), "fast", Position(3, 0))
        info = await logs.info(per_backend("kept"))
        assert {c.cursor.name: c.lag for c in info.cursors} == {"slow": 75, "fast": 40}
        assert info.end == Position(4, 20) and info.entries == {0: 20, 1: 20, 2: 20, 3: 20, 4: 20}
        result = await logs.trim(per_backend("kept"), retention=True)
        assert [s.number for s in result.removed] == [0] and result.start == Position(1, 0)
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.ledger_metadata(ledgers[0])
        for ledger_id in ledgers[1:]:
            await client.ledger_metadata(ledger_id)
        reader = await logs.reader(per_backend("kept"))
        with pytest.raises(bkframe.PositionTrimmedError):
            await reader.read(Position(0, 3))
        # The slow consumer acknowledges up to 2:19: segments 1 and 2 may go, not 3.
        await logs.ack(per_backend("kept"), "slow", Position(2, 19))
        result = await logs.trim(per_backend("kept"), before=Position(4, 0))
        assert [s.number for s in result.removed] == [1, 2]
        for ledger_id in ledgers[1:3]:
            with pytest.raises(bkframe.NoSuchLedgerError):
                await client.ledger_metadata(ledger_id)
        # Cursors never move back unless asked; forcing a trim moves the ones it passes.
        assert (await logs.move_cursor(per_backend("kept"), "fast", Position(2, 0))).position == Position(3, 0)
        result = await logs.trim(per_backend("kept"), before=Position(4, 0), force=True)
        assert [s.number for s in result.removed] == [3] and result.moved_cursors == ("fast", "slow")
        assert {c.name: c.position for c in await logs.cursors(per_backend("kept"))} == {
            "fast": Position(4, 0),
            "slow": Position(4, 0),
        }
        assert [e.payload for e in await reader.read("earliest")] == [payload("k", i) for i in range(80, 100)]
        # Once every cursor is past segment 4, the writer's next rollover lets retention take it.
        await logs.move_cursor(per_backend("kept"), "fast", "latest")
        await logs.move_cursor(per_backend("kept"), "slow", "latest")
        writer = await logs.open_writer(per_backend("kept"))
        for i in range(100, 125):
            writer.append_async(payload("k", i))
        await writer.flush()
        with anyio.fail_after(30):
            while (await logs.metadata(per_backend("kept"))).segment(4) is not None:
                await anyio.sleep(0.05)
        await writer.close()
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.ledger_metadata(ledgers[4])
        deleted = await logs.delete(per_backend("kept"))
        assert per_backend("kept") not in await logs.list_logs() and deleted.ledger_ids()
        for ledger_id in deleted.ledger_ids():
            with pytest.raises(bkframe.NoSuchLedgerError):
                await client.ledger_metadata(ledger_id)


@on_both_backends
async def test_entries_lost_in_flight_at_a_rollover_leave_no_gap(log_cluster: Cluster) -> None:
    """A writer died right after a rollover: segment 0 got entries 0..4 of the 10 it was
    sent (5..9 were in flight, never acknowledged), segment 1 got 3 entries (never
    acknowledged either: they wait for segment 0). A tail must not read segment 1 before
    the log says segment 0 is closed, and the next writer's open must drop segment 1, or
    the log would hold entries 10..12 without 5..9."""
    async with bkframe.open_client(log_cluster.metadata) as client:
        logs = Logs(client)
        await logs.create(per_backend("gap"))
        first = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        # Written as the dead writer wrote them: each record in its envelope.
        for i in range(5):
            await first.append(bkframe.encode_record(payload("e", i)))
        second = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        for i in range(10, 13):
            await second.append(bkframe.encode_record(payload("e", i)))
        await second.write_lac()  # its entries look confirmed at the ledger level
        # The dead writer's record: it had sent entries 0..9 to segment 0 before moving on.
        record = await logs.metadata(per_backend("gap"))
        dead = record.add_segment(first.ledger_id, now=1.0).add_segment(second.ledger_id, now=2.0)
        dead = attrs.evolve(dead.replace_segment(attrs.evolve(dead.segments[0], last_sent=9)), writer="dead", writer_epoch=1)
        await client.metadata.update_log(per_backend("gap"), dead.serialize(), record.version)
        reader = await logs.reader(per_backend("gap"))
        tailed: list[bkframe.LogEntry] = []
        refreshes, refresh = [0], reader.refresh

        async def counted_refresh() -> bkframe.LogMetadata:  # the tail's reads of the log record
            refreshes[0] += 1
            return await refresh()

        reader.refresh = counted_refresh  # type: ignore[method-assign]

        async def tail() -> None:
            async for entry in reader.tail("earliest", poll_timeout_s=0.2):
                tailed.append(entry)

        async with anyio.create_task_group() as nursery:
            nursery.start_soon(tail)
            with anyio.fail_after(30):
                while len(tailed) < 4:  # 0..3: the LAC trails the last entry
                    await anyio.sleep(0.05)
            # Segment 0's ledger gets closed (as the next writer's recovery does first) ...
            await client.open_ledger(first.ledger_id, recovery=True)
            # ... the tail reads its last entry and then waits for the log record: it reads
            # the record again and again, and nothing of segment 1.
            with anyio.fail_after(30):
                while len(tailed) < 5:
                    await anyio.sleep(0.05)
                looked = refreshes[0]
                while refreshes[0] < looked + 2:
                    await anyio.sleep(0.05)
            assert [e.payload for e in tailed] == [payload("e", i) for i in range(5)]
            writer = await logs.open_writer(per_backend("gap"))
            assert [(s.number, s.entries) for s in writer.metadata.segments if s.closed] == [(0, 5)]
            # Segment 1 never held an acknowledged entry: its number goes to the new segment.
            assert writer.segment == 1 and writer.metadata.segments[1].ledger_id != second.ledger_id
            with pytest.raises(bkframe.NoSuchLedgerError):
                await client.ledger_metadata(second.ledger_id)
            after = await writer.append(b"next")
            await writer.close()
            with anyio.fail_after(30):
                while len(tailed) < 6:
                    await anyio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert [e.payload for e in tailed] == [payload("e", i) for i in range(5)] + [b"next"]
        assert tailed[-1].position == after == Position(1, 0)


@on_both_backends
async def test_rollover_by_bytes_and_age_and_a_commit_beside_a_writer(log_cluster: Cluster) -> None:
    async with bkframe.open_client(log_cluster.metadata) as client:
        logs = Logs(client)
        await logs.create(per_backend("mixed"), rollover_bytes=100, rollover_s=0.5)
        writer = await logs.open_writer(per_backend("mixed"))
        # By bytes: the third 60-byte entry finds 120 bytes in the segment.
        positions = [await writer.append(b"x" * 60) for _ in range(3)]
        assert [p.segment for p in positions] == [0, 0, 1]
        # By age: the writer's timer rolls segment 1 over with no append coming.
        with anyio.fail_after(30):
            while not ((seg := (await logs.metadata(per_backend("mixed"))).segment(1)) and seg.closed):
                await anyio.sleep(0.05)
        assert seg.entries == 1
        # A commit beside the writer lands after the writer's current segment.
        ledger = await _closed_ledger(client, "c", 2, password=b"")
        committed = await logs.commit_ledgers(per_backend("mixed"), [ledger], "beside")
        current = await writer.append(b"y")
        assert current.segment < committed.segments[0]
        await writer.close()
        entries = await (await logs.reader(per_backend("mixed"))).read()
        assert [e.payload for e in entries] == [b"x" * 60] * 3 + [b"y", payload("c", 0), payload("c", 1)]
        # A writer that writes nothing leaves no segment behind.
        before = await logs.metadata(per_backend("mixed"))
        after = await (await logs.open_writer(per_backend("mixed"))).close()
        assert after.segments == before.segments and after.next_segment == before.next_segment
        assert after.writer == "" and after.garbage == ()


async def test_a_subscription_on_each_metadata_store(log_cluster: Cluster) -> None:
    """Subscriptions run on every store (docs/subscriptions.md): the owner's lock, its record
    and the fence in the log's record on sqlite, ZooKeeper and etcd. Two consumers (two
    clients) share a subscription through the bookie that owns it, and the rest is acked with an
    exactly-once commit of an output ledger (SUB_COMMIT, the fence checked by the store's
    multi-log update)."""
    uri = log_cluster.metadata
    name = f"sub-{uuid.uuid4().hex[:8]}"
    async with bkframe.open_client(uri) as client:
        logs = client.logs
        await logs.create(name, rollover_entries=20)
        await logs.create(f"{name}-out")
        async with await logs.open_writer(name) as w:
            await w.append_many([bkframe.Record(b"r%d" % i, key=b"k%d" % (i % 4)) for i in range(50)])
        await logs.create_subscription(name, "s")
        seen: list[Position] = []
        async with bkframe.open_client(uri) as other, await logs.subscribe(name, "s", prefetch=1) as a, \
                await other.logs.subscribe(name, "s", prefetch=1) as b:
            while len(seen) < 40:
                for sub in (a, b):
                    msg = await sub.receive(timeout_s=5)
                    assert msg is not None
                    seen.append(msg.position)
                    await msg.ack()
            stats = await logs.subscription_stats(name, "s")
            assert (stats.backlog, stats.acked) == (10, 40) and stats.owner is not None
            rest: list[Position] = []
            with anyio.fail_after(60):
                while len(rest) < 10:  # from either: some may be in b's prefetch
                    for sub in (a, b):
                        msg = await sub.receive(timeout_s=0.2)
                        if msg is not None:
                            rest.append(msg.position)
            out = await client.create_ledger(custom=bkframe.ENVELOPE_CUSTOM)
            await out.append(bkframe.encode_record(b"done"))
            await out.close()
            result = await a.commit(rest, {f"{name}-out": [out.ledger_id]})
            assert result[f"{name}-out"].segments == (0,)
        dup = [p for p in seen + rest if (seen + rest).count(p) > 1]
        assert not dup and len(seen + rest) == 50, (dup, len(seen), len(rest), seen, rest)
        stats = await logs.subscription_stats(name, "s")
        assert (stats.backlog, stats.acked) == (0, 50)
        assert (await logs.metadata(name)).fences == {"subscription/s": stats.epoch}
