"""Replicated ledgers end to end on clusters of real bookie processes (sqlite metadata).

Tests that only write and read share the session's cluster; those that kill or restart a
bookie, or count a bookie's events, start their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import bkframe
from bkframe import LedgerStateName
from bkframe.core.ledger_keys import master_key
from bkframe.testing.backends import on_backends, on_both_backends
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD, payload


@on_both_backends
async def test_striping_round_trip(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        pending = [writer.append_async(payload("entry", i)) for i in range(300)]
        assert [await pa.wait() for pa in pending] == list(range(300))
        md = await writer.close()
        length = sum(len(payload("entry", i)) for i in range(300))
        assert (md.state, md.last_entry_id, md.length) == (LedgerStateName.CLOSED, 299, length)
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 299)] == [payload("entry", i) for i in range(300)]
        # Striping: each bookie of the ensemble holds only its write sets (2 of 3 entries).
        held = {}
        for bookie_id in md.fragments[0][1]:
            bk = await client.pool.get(bookie_id)
            held[bookie_id] = sum(
                [(await bk.read(writer.ledger_id, e, master_key=master_key(PASSWORD))).status == 0 for e in range(30)]
            )
        assert sorted(held.values()) == [20, 20, 20]


@on_backends("asyncio")  # slow (a bookie killed or stopped): once, the backends taking turns
async def test_bookie_killed_mid_write_changes_ensemble(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        acked = []
        pending = []
        victim = cluster.by_id(writer.metadata.fragments[0][1][1])
        for i in range(2000):
            pending.append(writer.append_async(payload("entry", i)))
            if i == 700:
                victim.kill()
            if len(pending) > 64:
                acked.append(await pending.pop(0).wait())
        for pa in pending:
            acked.append(await pa.wait())
        assert acked == list(range(2000))
        md = await writer.close()
        assert len(md.fragments) >= 2, "the writer should have replaced the killed bookie"
        assert victim.bookie_id not in md.fragments[-1][1]
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 1999)] == [payload("entry", i) for i in range(2000)]


def _spawn_writer(metadata: str, e: int, w: int, a: int, acks_wanted: int) -> tuple[int, list[int]]:
    """Run a writer process, SIGKILL it after ``acks_wanted`` acknowledgements."""
    script = Path(__file__).with_name("writer_process.py")
    proc = subprocess.Popen([sys.executable, str(script), metadata, str(e), str(w), str(a)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ledger_id = int(proc.stdout.readline())
    acked = [int(proc.stdout.readline()) for _ in range(acks_wanted)]
    proc.kill()
    proc.wait()
    return ledger_id, acked


@on_both_backends
async def test_writer_killed_then_recovery_keeps_every_acked_entry(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    ledger_id, acked = await anyio.to_thread.run_sync(lambda: _spawn_writer(cluster.metadata, 3, 3, 2, 500))
    async with bkframe.open_client(cluster.metadata) as client:
        md = await client.ledger_metadata(ledger_id)
        assert md.state == LedgerStateName.OPEN
        reader = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        assert reader.closed
        last = reader.lac
        assert last >= max(acked), "recovery truncated an acknowledged entry"
        entries = await reader.read(0, last)
        # Every entry up to the end is one the writer really wrote, in order, with no gap.
        assert [e.payload for e in entries] == [payload("entry", i) for i in range(last + 1)]
        # Once closed, the end never moves: another recovery gives the same answer.
        again = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        assert again.lac == last


@on_both_backends
async def test_two_concurrent_recoveries_agree(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    ledger_id, acked = await anyio.to_thread.run_sync(lambda: _spawn_writer(cluster.metadata, 3, 2, 2, 300))
    results: list[int] = []

    async def recover() -> None:
        async with bkframe.open_client(cluster.metadata) as client:
            reader = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
            results.append(reader.lac)

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(recover)
        nursery.start_soon(recover)
    assert len(results) == 2 and results[0] == results[1] >= max(acked)


@on_both_backends
async def test_fenced_old_writer_fails(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client, bkframe.open_client(cluster.metadata) as other:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await writer.append(payload("entry", i))
        reader = await other.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
        assert reader.lac == 9
        with pytest.raises(bkframe.LedgerFencedError):
            await writer.append(b"too late")
        with pytest.raises(bkframe.LedgerFencedError):
            await writer.append(b"still too late")
        # The recovered ledger holds exactly what the writer had confirmed.
        assert [e.payload for e in await reader.read(0, 9)] == [payload("entry", i) for i in range(10)]


@on_backends("asyncio")  # slow (a bookie killed or stopped): once, the backends taking turns
async def test_corrupted_replica_is_read_from_another(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=PASSWORD)
        await writer.append(b"precious-payload-0123456789")
        await writer.close()
        first_replica = cluster.by_id(writer.metadata.fragments[0][1][0])
    # Flip a byte of the entry in the first replica's entry log (the reader's first choice).
    first_replica.stop()
    hits = 0
    for log in (first_replica.data_dir / "entrylogs").glob("*.log"):
        data = bytearray(log.read_bytes())
        at = data.find(b"precious-payload")
        if at >= 0:
            data[at] ^= 0xFF
            log.write_bytes(bytes(data))
            hits += 1
    assert hits == 1
    first_replica.start()
    async with bkframe.open_client(cluster.metadata) as client:
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 0)] == [b"precious-payload-0123456789"]


@on_backends("trio")  # slow (a bookie killed or stopped): once, the backends taking turns
async def test_open_empty_ledger_with_a_bookie_down(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        cluster.by_id(writer.metadata.fragments[0][1][2]).kill()
    async with bkframe.open_client(cluster.metadata) as client:
        # EC = E - A + 1 = 2 bookies are up: fencing completes and the empty ledger closes.
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
        assert reader.closed and reader.lac == -1


@on_both_backends
async def test_wrong_password_and_unknown_type(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        with pytest.raises(bkframe.UnauthorizedError):
            await client.open_ledger(writer.ledger_id, password=b"wrong")
        with pytest.raises(ValueError, match="unknown ledger type 'NOPE'"):
            await client.create_ledger(ledger_type="NOPE")
        with pytest.raises(bkframe.NoSuchLedgerError):
            await client.open_ledger(123456)


def test_blocking_facade(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    with bkframe.connect(cluster.metadata) as bk:
        writer = bk.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        assert writer.append(b"a") == 0
        assert writer.append_many([b"b", b"c"]) == [1, 2]
        writer.close()
        reader = bk.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in reader.read(0, reader.lac)] == [b"a", b"b", b"c"]
        assert writer.ledger_id in bk.list_ledgers()


@on_both_backends
async def test_tailing_reader_follows_the_writer(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        seen: list[bytes] = []

        async def tail() -> None:
            async for entry in reader.tail(0, poll_timeout_s=0.5):
                seen.append(entry.payload)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(tail)
                for i in range(20):
                    await writer.append(payload("entry", i))
                    await anyio.sleep(0.01)
                # The piggybacked LAC lags one entry behind the last add: the reader has seen
                # entries up to 18 by now, without the writer closing anything.
                while len(seen) < 19:
                    await anyio.sleep(0.01)
                assert seen == [payload("entry", i) for i in range(19)]
                await writer.close()
        # After the close the tail delivered the last entry and ended by itself.
        assert seen == [payload("entry", i) for i in range(20)]


@on_both_backends
async def test_long_poll_waits_for_the_lac(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await writer.append(b"a")
        # append() returns at A=2 acks: let the third replica (maybe bookie 0) have it too.
        with anyio.fail_after(10):
            await writer._all_answered.wait()
        bookie = await client.pool.get(writer.metadata.fragments[0][1][0])
        start = anyio.current_time()
        r = await bookie.read_lac(writer.ledger_id, previous_lac=-1, timeout_ms=200)
        assert r.lac == -1 and anyio.current_time() - start >= 0.15  # nothing moved: timed out
        async with anyio.create_task_group() as nursery:
            got: list[int] = []

            async def poll() -> None:
                got.append((await bookie.read_lac(writer.ledger_id, previous_lac=-1, timeout_ms=10_000)).lac)

            waiting = (await bookie.info())["counters"]["long_polls_waiting"]
            nursery.start_soon(poll)
            # The bookie holds the poll (kit.wait_until is trio's; this test runs on asyncio too).
            with anyio.fail_after(10):
                while (await bookie.info())["counters"]["long_polls_waiting"] <= waiting:
                    await anyio.sleep(0.01)
            assert got == []
            await writer.append(b"b")  # piggybacks LAC 0
        assert got == [0]


@pytest.mark.parametrize("ledger_type", ["PD_JOURNAL", "BYPASS_JOURNAL"])
@on_both_backends
async def test_explicit_lac_lets_a_tailing_reader_see_the_last_entry(shared_cluster: Cluster, ledger_type: str) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata, explicit_lac_interval_s=0.1) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD)
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        for i in range(5):
            await writer.append(payload("entry", i))
        # No further add carries LAC 4; the handle publishes it on its own once idle.
        with anyio.fail_after(10):
            while await reader.read_lac() < 4:
                await anyio.sleep(0.05)
        assert [e.payload for e in await reader.read(0, 4)] == [payload("entry", i) for i in range(5)]
        # And write_lac() does it at once.
        await writer.append(payload("entry", 5))
        assert await writer.write_lac() == 5
        assert await reader.read_lac() == 5


@on_backends("trio")  # slow (a bookie killed or stopped): once, the backends taking turns
async def test_close_sends_an_advisory_write_close(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await writer.append(b"last")
        await writer.close()  # does not wait for the write closes
        with anyio.fail_after(10):
            for bookie_id in writer.metadata.fragments[-1][1]:
                conn = await client.pool.get(bookie_id)
                while (await conn.info())["counters"]["write_closed_ledgers"] < 1:
                    await anyio.sleep(0.05)


@on_both_backends
async def test_append_many_confirms_a_batch_in_order(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        assert await writer.append_many([payload("entry", i) for i in range(500)]) == range(0, 500)
        assert await writer.append_many([]) == range(0)
        # Waiting on appends already confirmed returns their ids at once, in order.
        batch = writer.append_many_async([payload("entry", i) for i in range(500, 1000)])
        assert await batch[-1].wait() == 999
        assert all(pa.done() for pa in batch)
        assert [await pa.wait() for pa in batch] == list(range(500, 1000))
        assert writer.lac == 999 and writer.length == sum(len(payload("entry", i)) for i in range(1000))
        await writer.close()
        with pytest.raises(bkframe.LedgerClosedError):
            await writer.append_many([b"late"])
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 999)] == [payload("entry", i) for i in range(1000)]


@on_both_backends
async def test_append_many_fails_when_the_ledger_is_fenced(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await writer.append_many([payload("entry", i) for i in range(10)])
        async with bkframe.open_client(cluster.metadata) as other:
            await other.open_ledger(writer.ledger_id, password=PASSWORD)  # recovery fences the bookies
        with pytest.raises(bkframe.LedgerFencedError):
            await writer.append_many([payload("entry", i) for i in range(10, 300)])
