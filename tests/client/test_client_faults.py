"""Client faults on real bookie processes: hung bookies, dead bookies in recovery, closing
races, slow replicas at close, bookies that come back (issue 10, defects 1, 2, 3, 9, 10).

Every wait has a deadline (``anyio.fail_after``): before the fixes these tests hung or
failed; a hang must show as a failure naming what hung, not as a stuck suite.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio
from click.testing import CliRunner

import bkframe
from bkframe import DigestType, LedgerStateName
from bkframe.cli.ledger import ledger as ledger_group
from bkframe.client.distribution import write_set
from bkframe.client.entry_format import Digester
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from bkframe.testing.backends import on_backends
from bkframe.testing.kit import FAST, PASSWORD, payload, wait_until

#: Short timeouts so that a hung bookie costs the tests seconds.
#: Bookies whose journal holds a group 1.5 s before its fsync.
SLOW_SYNC = """
[journal]
plugin = "journal_fs"
flush_when_queue_empty = false
max_wait_ms = 1500.0
buffered_bytes_threshold = 104857600
"""
#: A connect timeout far above what a quorum decision should take (BookKeeper's default).
CONNECT_S = 10.0
#: Bookies whose registration outlives a test's SIGSTOP, as a ZooKeeper session of a minute
#: would: with the default 6 s, a client listing the bookies later than that finds the hung
#: one gone and never connects, which would hide a wait for its connect.
LONG_REGISTRATION = """
[bookie]
registration_ttl_s = 60.0
"""
T = TypeVar("T")


async def _held(client: Any, bookie_id: str, ledger_id: int, last: int) -> set[int]:
    """Entry ids 0..last the bookie holds (LIST_ENTRIES)."""
    conn = await client.pool.get(bookie_id)
    with anyio.fail_after(10):
        r = await conn.submit_list_entries(ledger_id, 0, last).wait()
    return {e for a, b in r.runs for e in range(a, b + 1)} if r.status == 0 else set()


@on_backends("trio")  # slow (faults on real processes): once, the backends taking turns
async def test_hung_bookie_append_changes_ensemble(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        for i in range(5):
            await writer.append(payload("entry", i))
        hung = cluster.by_id(writer.metadata.fragments[0][1][0])
        hung.hang()
        try:
            with anyio.fail_after(30):  # without an add timeout this waits forever
                for i in range(5, 15):
                    assert await writer.append(payload("entry", i)) == i
            md = writer.metadata
            assert len(md.fragments) == 2 and hung.bookie_id not in md.fragments[-1][1]
            with anyio.fail_after(30):
                await writer.close()
        finally:
            hung.resume()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 14)] == [payload("entry", i) for i in range(15)]


@on_backends("asyncio")  # slow (faults on real processes): once, the backends taking turns
async def test_hung_bookie_does_not_stall_recovery_or_lac_reads(cluster_factory: Any) -> None:
    """With one bookie of an E3 W3 A2 ledger SIGSTOPped, fresh clients (no connection yet)
    close it from the CLI, read its LAC, long-poll it, recover it and read it back, each in
    a fraction of the connect timeout: the other two bookies' answers decide (issue 35:
    the CLI's close took 10.6 s, a LAC read 10 s, a read of a hung first replica 10 s).
    The kernel completes a stopped process's TCP handshakes, so only the AUTH answer
    never comes: a connect then lasts the whole connect timeout."""
    cluster = cluster_factory(3, config=LONG_REGISTRATION)
    fast = {**FAST, "connect_timeout_s": CONNECT_S}
    async with bkframe.open_client(cluster.metadata, **fast) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        left_open = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        pending = [left_open.append_async(payload("open", i)) for i in range(10)]
        for i in range(10):  # one by one: each add carries the LAC of the one before
            await writer.append(payload("entry", i))
        for pa in pending:
            await pa.wait()
        with anyio.fail_after(10):  # every bookie answered: the writers have nothing left to time out
            while writer._outstanding or left_open._outstanding:
                await anyio.sleep(0.01)
        hung = cluster.by_id(writer.metadata.fragments[0][1][2])
        hung.hang()
        try:
            # The CLI's command, as the issue ran it (its connect timeout is the default,
            # 10 s), in a thread: a process would add its imports, seconds on a loaded machine.
            runner = CliRunner()
            command = ["close", str(left_open.ledger_id), "--password", PASSWORD.decode()]
            with anyio.fail_after(60):
                closed = await _within(
                    0.4 * CONNECT_S,
                    "bkframe ledger close",
                    anyio.to_thread.run_sync(
                        lambda: runner.invoke(ledger_group, command, env={"BKFRAME_METADATA": cluster.metadata})
                    ),
                )
            assert closed.output.strip() == f"ledger {left_open.ledger_id} closed at entry 9", closed.output

            async with bkframe.open_client(cluster.metadata, **fast) as other:
                with anyio.fail_after(3 * CONNECT_S):
                    tailer = await _within(
                        0.4 * CONNECT_S,
                        "an open without recovery (LAC read)",
                        other.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False),
                    )
                    assert tailer.lac >= 8
                    # A long poll with nothing new ends with the poll, not a hung bookie's connect.
                    await _within(0.4 * CONNECT_S, "a long poll", tailer.wait_for_lac(tailer.lac, timeout_s=0.5))

            async with bkframe.open_client(cluster.metadata, **fast) as fresh:
                with anyio.fail_after(3 * CONNECT_S):
                    recovered = await _within(
                        0.4 * CONNECT_S,
                        "recovery (fence, read, write back, close)",
                        fresh.open_ledger(writer.ledger_id, password=PASSWORD),
                    )
                    assert recovered.metadata.state == LedgerStateName.CLOSED
                    assert recovered.lac == 9
                    entries = await _within(0.4 * CONNECT_S, "reading it back", recovered.read(0, 9))
                    assert [e.payload for e in entries] == [payload("entry", i) for i in range(10)]
                # The old writer is fenced out by the two bookies that answered.
                with anyio.fail_after(20):
                    try:
                        await writer.append(b"late")
                    except bkframe.LedgerFencedError:
                        pass
                    else:
                        raise AssertionError("the fenced writer's append succeeded")
                # Nobody waited for the hung bookie's connect, but it went on: once the
                # bookie runs again, the connection is there for later requests.
                hung.resume()
                with anyio.fail_after(CONNECT_S):
                    while fresh.pool.connected(hung.bookie_id) is None:
                        await anyio.sleep(0.05)
        finally:
            hung.resume()


async def _within(limit_s: float, what: str, call: Awaitable[T]) -> T:
    started = anyio.current_time()
    result = await call
    took = anyio.current_time() - started
    assert took < limit_s, f"{what} took {took:.1f} s with one bookie hung (connect timeout {CONNECT_S} s)"
    return result


@on_backends("trio")  # slow (faults on real processes): once, the backends taking turns
async def test_reads_fail_over_from_a_hung_first_replica(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=LONG_REGISTRATION)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        pending = [writer.append_async(payload("entry", i)) for i in range(300)]
        for pa in pending:
            await pa.wait()
        md = await writer.close()
    ensemble = md.fragments[0][1]
    # The first replica of entry 0 (and of every third entry) stops answering.
    hung = cluster.by_id(ensemble[write_set(0, 3, 3)[0]])
    hung.hang()
    try:
        # A fresh client: no read may wait for the hung replica's connect (issue 35: 10 s)
        # rather than speculate past it.
        async with bkframe.open_client(cluster.metadata, **FAST, connect_timeout_s=CONNECT_S) as client:
            reader = await client.open_ledger(md.ledger_id, password=PASSWORD)
            with anyio.fail_after(30):  # without read timeouts this waits forever
                entries = await _within(0.4 * CONNECT_S, "a read of a hung first replica", reader.read(0, 299))
            assert [e.payload for e in entries] == [payload("entry", i) for i in range(300)]
    finally:
        hung.resume()


@on_backends("asyncio")  # slow (faults on real processes): once, the backends taking turns
async def test_recovery_replaces_a_dead_bookie_of_the_tail(cluster_factory: Any) -> None:
    """W = A (E=3 W=2 A=2): one bookie of the tail entry's write set is gone for good.
    Recovery must write the tail back to a replacement instead of failing forever."""
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        for i in range(20):
            await writer.append(payload("entry", i))
        ensemble = writer.metadata.fragments[0][1]
    # The writer is gone without closing: the bookies know LAC 18, so entry 19 is the
    # tail recovery must find and write back, to ensemble[1] and ensemble[2].
    dead = cluster.by_id(ensemble[write_set(19, 3, 2)[0]])
    dead.kill()
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        with anyio.fail_after(60):
            reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        md = reader.metadata
        assert md.state == LedgerStateName.CLOSED and md.last_entry_id == 19
        assert dead.bookie_id not in md.ensemble_at(19), md.fragments
        assert md.ensemble_at(0) == ensemble  # the writer's fragments are kept
        with anyio.fail_after(30):
            assert [e.payload for e in await reader.read(0, 19)] == [payload("entry", i) for i in range(20)]
        # The tail is on two live bookies of its new write set, and the replacement is
        # fenced like the others: an ordinary add past the end is refused there too.
        tail_set = [md.ensemble_at(19)[i] for i in write_set(19, 3, 2)]
        replacement = next(b for b in md.ensemble_at(19) if b not in ensemble)
        for bookie_id in tail_set:
            assert 19 in await _held(client, bookie_id, md.ledger_id, 19), bookie_id
        data = Digester.for_ledger(DigestType.CRC32C, PASSWORD).encode(md.ledger_id, 20, 19, 0, b"late")
        conn = await client.pool.get(replacement)
        late = await conn.add(md.ledger_id, 20, data, master_key=master_key(PASSWORD))
        assert late.status == Status.FENCED, late


@on_backends("trio")  # slow (faults on real processes): once, the backends taking turns
async def test_vd_close_refuses_appends_once_started(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=SLOW_SYNC)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        for i in range(5):
            await writer.append(payload("entry", i))
        acked: list[int] = []
        refused = 0
        closed: list[Any] = []
        async with anyio.create_task_group() as nursery:

            async def close() -> None:
                closed.append(await writer.close())

            nursery.start_soon(close)
            # close() has started: it waits for its SYNC (a 1.5 s group commit).
            await wait_until(lambda: writer._closing, "close() to start", 10, every_s=0.01)
            assert not closed
            for i in range(5, 10):
                try:
                    pending = writer.append_async(payload("entry", i))
                except bkframe.LedgerClosedError:
                    refused += 1
                    continue

                async def wait(pending: Any = pending) -> None:
                    try:
                        acked.append(await pending.wait())
                    except bkframe.BKError:
                        pass

                nursery.start_soon(wait)
        md = closed[0]
        assert refused == 5, f"appends after close() started were accepted; acked {acked}"
        assert all(entry <= md.last_entry_id for entry in acked), (acked, md.last_entry_id)
        assert md.last_entry_id == 4
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 4)] == [payload("entry", i) for i in range(5)]


@on_backends("asyncio")  # slow (faults on real processes): once, the backends taking turns
async def test_close_retry_after_a_failed_cas(cluster_factory: Any) -> None:
    """A close whose metadata update fails raises and may be retried."""
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(3):
            await writer.append(payload("entry", i))
        store = client.metadata
        real_update = store.update_ledger
        calls = 0

        async def failing_update(*args: Any, **kw: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise bkframe.BKError("metadata store unreachable (injected)")
            return await real_update(*args, **kw)

        store.update_ledger = failing_update  # type: ignore[method-assign]
        try:
            await writer.close()
        except bkframe.BKError:
            pass
        else:
            raise AssertionError("the injected failure was not raised")
        md = await writer.close()
        assert md.state == LedgerStateName.CLOSED and md.last_entry_id == 2
        assert (await client.ledger_metadata(writer.ledger_id)).state == LedgerStateName.CLOSED


@on_backends("trio")  # slow (faults on real processes): once, the backends taking turns
async def test_close_waits_for_the_slow_replica_and_never_changes_a_closed_ledger(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, add_timeout_s=20.0) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        slow = cluster.by_id(writer.metadata.fragments[0][1][2])
        slow.hang()
        resumed = False
        try:
            pending = [writer.append_async(payload("entry", i)) for i in range(200)]
            for pa in pending:
                await pa.wait()  # two bookies acknowledge; the third is stopped
            close_done = anyio.Event()
            closed: list[Any] = []
            async with anyio.create_task_group() as nursery:

                async def close() -> None:
                    closed.append(await writer.close())
                    close_done.set()

                nursery.start_soon(close)
                with anyio.move_on_after(1.0):
                    await close_done.wait()
                assert not close_done.is_set(), "close() returned while a replica had not answered"
                slow.resume()
                resumed = True
        finally:
            if not resumed:
                slow.resume()
        md = closed[0]
        assert md.last_entry_id == 199 and len(md.fragments) == 1
        # Fully replicated: the slow bookie holds every entry too.
        for bookie_id in md.fragments[0][1]:
            assert await _held(client, bookie_id, md.ledger_id, 199) == set(range(200)), bookie_id
    # The client is gone; the closed ledger's metadata did not change after close.
    async with bkframe.open_client(cluster.metadata) as client:
        assert (await client.ledger_metadata(md.ledger_id)).fragments == md.fragments
    assert not any("changing ensemble" in b.log() for b in cluster.bookies)


@on_backends("asyncio")  # slow (faults on real processes): once, the backends taking turns
async def test_writer_returns_to_bookies_that_restarted(cluster_factory: Any) -> None:
    """Bookies restarted one after another: a failed bookie is quarantined, not banned, so
    the writer never runs out of bookies while they all come back."""
    cluster = cluster_factory(4)
    # Kills surface as closed connections; a long add timeout keeps a live but slow bookie
    # (a loaded machine) from failing at the same moment, which would leave 4 bookies too
    # few to replace two of an ensemble of 3 -- not what this test is about.
    async with bkframe.open_client(cluster.metadata, **{**FAST, "add_timeout_s": 15.0}) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        entry = 0
        for _ in range(2):
            for b in cluster.bookies:
                b.kill()
                b.start(*cluster.bookie_args)
                with anyio.fail_after(60):
                    for _ in range(20):
                        assert await writer.append(payload("entry", entry)) == entry
                        entry += 1
        with anyio.fail_after(60):
            md = await writer.close()
        assert md.last_entry_id == entry - 1
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, entry - 1)] == [payload("entry", i) for i in range(entry)]


@on_backends("trio")  # slow (faults on real processes): once, the backends taking turns
async def test_a_reader_follows_an_ensemble_change_it_did_not_see(cluster_factory: Any) -> None:
    """A no-recovery reader opened before the writer replaced every bookie it knows: its
    LAC read and its reads find the new bookies through the ledger's metadata."""
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, **FAST) as client, bkframe.open_client(cluster.metadata, **FAST) as other:
        writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await writer.append(payload("entry", i))
        reader = await other.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        first = writer.metadata.fragments[0][1]
        for k, victim in enumerate(first):
            cluster.by_id(victim).kill()
            with anyio.fail_after(30):
                for i in range(10 + 5 * k, 15 + 5 * k):
                    assert await writer.append(payload("entry", i)) == i
        assert not set(writer.metadata.fragments[-1][1]) & set(first)
        with anyio.fail_after(30):
            assert await reader.read_lac() >= 18  # every bookie it knew of is gone
            entries = await reader.read(10, 18)
            assert [e.payload for e in entries] == [payload("entry", i) for i in range(10, 19)]
            unconfirmed = await reader.read_unconfirmed(19, 19)
            assert unconfirmed[0].payload == payload("entry", 19)


@on_backends("asyncio")  # slow (faults on real processes): once, the backends taking turns
async def test_a_bookie_lost_under_a_full_ensemble_is_named_with_what_would_survive(cluster_factory: Any) -> None:
    """E=3 on three bookies: one dies during appends and no bookie can replace it. The
    error names it, says why each other bookie could not stand in, and what would have
    survived (issue 37: it said only "unreachable: none")."""
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await writer.append(payload("entry", i))
        ensemble = writer.metadata.fragments[0][1]
        cluster.by_id(ensemble[1]).kill()
        with anyio.fail_after(30):
            try:
                for i in range(10, 10_000):
                    await writer.append(payload("entry", i))
            except bkframe.NotEnoughBookiesError as e:
                message = str(e)
            else:
                raise AssertionError("the writer went on without a replacement for the dead bookie")
        # A new ledger of 3 now: the two bookies left are named, and so is the way out.
        with anyio.fail_after(30):
            try:
                await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
            except bkframe.NotEnoughBookiesError as e:
                create_message = str(e)
            else:
                raise AssertionError("a ledger of 3 was made on 2 live bookies")
    reachable = create_message.partition("2 are reachable: ")[2].partition(" (")[0]
    assert sorted(reachable.split(", ")) == sorted([ensemble[0], ensemble[2]]), create_message
    assert "ensemble 2 or fewer" in create_message, create_message
    assert f"ledger {writer.ledger_id}: {ensemble[1]} failed and no bookie can replace it" in message, message
    assert f"{ensemble[0]} is in the ensemble already" in message and f"{ensemble[2]} is in the ensemble already" in message
    assert "with 3 bookies, an ensemble of 3 has no spare" in message and "ensemble 2 or fewer" in message, message
