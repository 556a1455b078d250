"""Network partitions on real processes, each on a simulated host of its own (issue 25):
bookies, a three-member ZooKeeper ensemble, writers, readers and autorecovery. Every
acknowledgement a client got is checked byte for byte at the end."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path

import trio

import bkframe
from bkframe.testing.kit import FAST, payload, wait_until
from tests.partitions.conftest import Cell, EtcdCell
from tests.partitions.harness import check_ledger

#: How long past its request timeout a client may take to act on a partition.
SLACK_S = 5.0


async def test_a_writer_cut_off_from_one_bookie_changes_its_ensemble(healed: Cell) -> None:
    cell = healed
    writer = cell.agent("c1")
    created = writer.request("create", e=3, w=3, a=2)
    ledger, ensemble = created["ledger"], created["ensemble"]
    writer.request("append", ledger=ledger, window=8)
    writer.wait_acks(ledger, 200)
    victim = ensemble[1]
    cut_at = time.monotonic()
    cell.net.cut(writer.host, cell.host_of_bookie(victim))
    deadline = cut_at + FAST["add_timeout_s"] + SLACK_S
    while True:
        fragments = writer.request("metadata", ledger=ledger)["fragments"]
        if victim not in fragments[-1][1]:
            changed_after = time.monotonic() - cut_at
            break
        assert time.monotonic() < deadline, f"no ensemble change {deadline - cut_at:.0f} s after the cut: {fragments}"
        time.sleep(0.1)
    assert changed_after <= FAST["add_timeout_s"] + SLACK_S
    writer.wait_acks(ledger, 200)  # and it goes on writing
    writer.request("stop", ledger=ledger)
    assert writer.event("failed") == []
    last = writer.request("close", ledger=ledger)["last"]
    acked = writer.acked(ledger)
    assert acked == list(range(len(acked))) and last >= acked[-1]
    cell.net.heal()
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        assert await check_ledger(client, ledger, acked) == last


async def test_a_writer_cut_off_from_the_metadata_store_is_fenced_by_a_recovery(healed: Cell) -> None:
    """The writer still reaches every bookie, but not ZooKeeper; another client recovers
    and closes its ledger. The writer gets no acknowledgement past the recovered end."""
    cell = healed
    writer = cell.agent("c1")
    ledger = writer.request("create", e=3, w=3, a=2)["ledger"]
    writer.request("append", ledger=ledger, window=8)
    writer.wait_acks(ledger, 100)
    for zk in cell.zk_hosts:
        cell.net.cut(writer.host, zk)
    writer.wait_acks(ledger, 100)  # appends need no metadata: it goes on
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        recovered = await client.open_ledger(ledger, password=b"pw", recovery=True)
        end = recovered.lac
        failed = writer.wait_for(lambda e: e.get("failed") == ledger, 30, "the writer to find itself fenced")
        assert failed["error"] == "LedgerFencedError", failed
        acked = writer.acked(ledger)
        assert acked and max(acked) <= end, f"acknowledged {max(acked)} past the recovered end {end}"
        cell.net.heal()
        assert await check_ledger(client, ledger, acked) == end


async def test_a_named_log_writer_cut_off_from_the_metadata_store_finds_itself_fenced(healed: Cell) -> None:
    cell = healed
    name = f"partitioned-{time.monotonic_ns()}"
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        # One segment for the whole test: the old writer is cut off mid-segment, not at a rollover.
        await client.logs.create(name, rollover_entries=1_000_000, password=b"pw")
    old = cell.agent("c1")
    old.request("log_append", log=name, window=4)
    old.wait_for(lambda e: len(old.event("log_ack")) >= 150, 60, "150 log appends")
    for zk in cell.zk_hosts:
        cell.net.cut(old.host, zk)
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        new = await client.logs.open_writer(name, password=b"pw")  # recovers the open segment: fences the old
        first_new = await new.append(b"the new writer")
        failed = old.wait_for(lambda e: e.get("log_failed") == name, 30, "the old log writer to find itself fenced")
        assert failed["error"] in ("LogFencedError", "LedgerFencedError"), failed
        cell.net.heal()
        acks = old.event("log_ack")
        reader = await client.logs.reader(name, password=b"pw")
        entries = {str(e.position): e.payload for e in await reader.read()}
        for ack in acks:
            _, position, pid, n = ack["log_ack"]
            assert entries.get(position) == payload(name, pid, n), f"acknowledged {position} is not in the log as written"
            assert bkframe.Position.parse(position) < first_new  # nothing of the old writer after the new one's
        await new.close()


async def registered(client: bkframe.Client) -> dict[str, list[str]]:
    """Bookie id -> the addresses registered under it (never more than one)."""
    out: dict[str, list[str]] = {}
    with trio.fail_after(30):
        for b in await client.metadata.list_bookies():
            out.setdefault(b.bookie_id, []).append(b.address)
    return out


def start_autorecovery(cell: Cell, host: str, holder: str, config: str) -> subprocess.Popen[bytes]:
    """``bkframe autorecovery`` on ``host``, taking locks as ``holder`` (unique per test: a
    killed one's lock outlives it by a session timeout); its log is ``HOLDER.log``."""
    path = cell.root / f"{holder}.toml"
    path.write_text(config)
    log = open(cell.root / f"{holder}.log", "ab")
    return cell.host(host).popen(
        [sys.executable, "-m", "bkframe", "autorecovery", "--metadata", cell.metadata, "--config", str(path), "--holder", holder],
        stdout=log, stderr=subprocess.STDOUT,
    )


def log_times(path: Path, text: str) -> list[datetime.datetime]:
    """When each line of a bkframe log that contains ``text`` was written."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if text in line:
            out.append(datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f"))
    return out


async def test_a_bookie_cut_off_from_the_metadata_store_keeps_serving_and_registers_again(healed: Cell) -> None:
    """Decided behaviour (docs/deployment.md): a bookie that loses its ZooKeeper session keeps
    serving the clients that reach it; its registration lapses, so no new ensemble picks it;
    healed, it registers again under its id, once. Autorecovery (lost_bookie_grace_s longer
    than the cut) marks nothing of a bookie that is alive."""
    cell = healed
    holder = f"a1-{time.monotonic_ns()}"
    auditor = start_autorecovery(cell, "a1", holder, "[autorecovery]\nlost_bookie_grace_s = 60.0\ncheck_interval_s = 0.5\n")
    try:
        async with bkframe.open_client(cell.metadata, **FAST) as client:
            await wait_until(lambda: _auditor_is(client, holder), "a1 to be the auditor", 60, every_s=0.2)
            before = await registered(client)
            victim = "bookie-3"
            writer = cell.agent("c1")
            ledger = writer.request("create", e=4, w=4, a=3)["ledger"]
            writer.request("append", ledger=ledger, window=8)
            writer.wait_acks(ledger, 100)
            for zk in cell.zk_hosts:
                cell.net.cut(cell.host_of_bookie(victim), zk)
            cut_at = time.monotonic()

            async def unregistered() -> bool:
                return victim not in await registered(client)

            await wait_until(unregistered, f"{victim}'s registration to lapse", 30, every_s=0.2)
            # Still serving: the writer's appends go on through it, with no ensemble change.
            writer.wait_acks(ledger, 200)
            assert victim in writer.request("metadata", ledger=ledger)["fragments"][-1][1]
            # No new ledger is placed on it.
            for _ in range(5):
                w = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
                assert victim not in w.metadata.fragments[0][1]
                await w.close()
            assert time.monotonic() - cut_at < 60
            cell.net.heal()

            async def back() -> bool:
                return victim in await registered(client)

            await wait_until(back, f"{victim} to register again", 30, every_s=0.2)
            after = await registered(client)
            assert after == before, (before, after)  # one registration per id, at the same address
            writer.wait_acks(ledger, 100)
            writer.request("stop", ledger=ledger)
            writer.request("close", ledger=ledger)
            await check_ledger(client, ledger, writer.acked(ledger))
            assert await client.metadata.list_under_replicated() == []
    finally:
        auditor.kill()
        auditor.wait()


async def _auditor_is(client: bkframe.Client, holder: str) -> bool:
    with trio.fail_after(30):
        return await client.metadata.lock_holder("auditor") == holder


#: How long a second auditor is watched contending for the lock (its check_interval_s is
#: 0.5 s: several tries). Only a window shows that something does not happen, when each
#: try that fails leaves no trace.
CONTENDING_S = 2.0


async def test_an_auditor_cut_off_from_the_metadata_store_stops_before_another_starts(healed: Cell) -> None:
    cell = healed
    config = "[autorecovery]\ncheck_interval_s = 0.5\nlost_bookie_grace_s = 60.0\n"
    token = time.monotonic_ns()
    one, two = f"first-{token}", f"second-{token}"
    first = start_autorecovery(cell, "a1", one, config)
    try:
        async with bkframe.open_client(cell.metadata, **FAST) as client:
            await wait_until(lambda: _auditor_is(client, one), "a1 to be the auditor", 60, every_s=0.2)
            second = start_autorecovery(cell, "a2", two, config)
            try:
                # a2 runs, and its auditor tries the lock every check_interval_s: a failed try
                # leaves no trace to wait for, so a window of several tries it is.
                running = f"autorecovery running as {two}"
                await wait_until(lambda: running in (cell.root / f"{two}.log").read_text(), "a2 to run", 60, every_s=0.2)
                await trio.sleep(CONTENDING_S)
                assert await _auditor_is(client, one)  # one auditor at a time
                for zk in cell.zk_hosts:
                    cell.net.cut("a1", zk)
                await wait_until(lambda: _auditor_is(client, two), "a2 to take over", 60, every_s=0.2)
                cell.net.heal()
                # a1 reaches the store again, and its auditor tries the lock again and again
                # (nothing marks a failed try): a window of several tries.
                await trio.sleep(CONTENDING_S)
                assert await _auditor_is(client, two)  # the old one does not take it back
            finally:
                second.kill()
                second.wait()
    finally:
        first.kill()
        first.wait()
    stopped = log_times(cell.root / f"{one}.log", f"{one} lost the auditor lock; it stops auditing")
    started = log_times(cell.root / f"{two}.log", f"{two} is the auditor")
    began = log_times(cell.root / f"{one}.log", f"{one} is the auditor")
    assert len(began) == len(stopped) == len(started) == 1, "each log says what it did, once"
    assert stopped[0] < started[0], f"a1 stopped auditing at {stopped[0]}, a2 started at {started[0]}"


async def _write_and_close(client: bkframe.Client, label: str, count: int = 20) -> None:
    """Create, write and close a ledger, and read it back."""
    writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw")
    for i in range(count):
        await writer.append(payload(writer.ledger_id, i))
    await writer.close()
    await check_ledger(client, writer.ledger_id, list(range(count)))


async def test_a_zookeeper_minority_with_its_leader_cut_off_leaves_the_majority_working(healed: Cell) -> None:
    cell = healed
    leader = cell.zk.leader()
    writer = cell.agent("c2")
    ledger = writer.request("create", e=3, w=3, a=2)["ledger"]
    writer.request("append", ledger=ledger, window=8)
    writer.wait_acks(ledger, 50)
    cell.net.isolate(leader.host)  # the leader and its clients' connections: gone
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        # While the two left elect a leader they take no session, and the store's client
        # may try the cut host first (its connect attempt times out): on a loaded machine
        # that can outlast one start's 10 s, which fails the call with a MetadataError that
        # names the store. The next call starts again; after the failover every round
        # works the first time.
        with trio.fail_after(60):
            while True:
                try:
                    await _write_and_close(client, "majority-failover")
                    break
                except (bkframe.MetadataError, bkframe.NotEnoughBookiesError):
                    await trio.sleep(1)
        for i in range(3):
            with trio.fail_after(60):
                await _write_and_close(client, f"majority-{i}")
        assert cell.zk.leader().host is not leader.host
        writer.wait_acks(ledger, 100)
        writer.request("stop", ledger=ledger)
        writer.request("close", ledger=ledger, timeout_s=90)  # the close's metadata write goes to the majority
        cell.net.heal()
        await check_ledger(client, ledger, writer.acked(ledger))
    await trio.to_thread.run_sync(cell.zk.wait_serving, 3)


async def test_an_etcd_minority_with_its_leader_cut_off_leaves_the_majority_working(etcd_cell: EtcdCell) -> None:
    """The cut member is the leader and the one every bookie's store client talks to (the
    first of the URI): new ledgers' first adds meet the bookies' key checks while their store
    clients fail over (5 s on the cut member, more than FAST's 2 s add timeout). The bookies
    answer TRY_AGAIN and the writers send again to the same bookies: every ledger works the
    first time, with no ensemble change (issue 35)."""
    cell = etcd_cell
    cut = cell.etcd.members[0]
    await trio.to_thread.run_sync(cell.etcd.move_leader, cut)
    # The test's client talks to the majority only: its own calls do not fail over.
    majority = f"etcd://{','.join(m.address for m in cell.etcd.members[1:])}/cell"
    async with bkframe.open_client(majority, **FAST) as client:
        # Created before the cut, first written after it: their first adds reach the bookies
        # at once, before the bookies' store clients have noticed the cut.
        writers = [await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"pw") for _ in range(3)]
        cell.net.isolate(cut.host)
        try:
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for w in writers:
                        nursery.start_soon(w.append_many, [payload(w.ledger_id, i) for i in range(20)])
                for w in writers:
                    await w.close()
                    await check_ledger(client, w.ledger_id, list(range(20)))
            counters = client.context.counters
            assert counters.tries_again > 0 and counters.ensemble_changes == 0, counters
            for i in range(3):  # created, written and closed during the cut: each works the first time
                with trio.fail_after(60):
                    await _write_and_close(client, f"majority-{i}")
            assert client.context.counters.ensemble_changes == 0
            assert cell.etcd.leader().host is not cut.host
            assert len(await registered(client)) == 3  # the bookies' leases live on through the majority
        finally:
            cell.net.heal()


async def test_a_host_cut_off_and_healed_while_a_writer_and_a_tailing_reader_run(healed: Cell) -> None:
    cell = healed
    writer = cell.agent("c1")
    created = writer.request("create", e=3, w=3, a=2)
    ledger = created["ledger"]
    writer.request("append", ledger=ledger, window=8)
    reader = cell.agent("c2")
    reader.request("tail", ledger=ledger)
    writer.wait_acks(ledger, 100)
    bookie_host = cell.host_of_bookie(created["ensemble"][0])
    cell.net.isolate(bookie_host)  # a bookie of the ensemble
    writer.wait_acks(ledger, 100, timeout_s=60)  # the writer goes on without it
    writer.wait_acks(ledger, 100, timeout_s=60)
    cell.net.heal(bookie_host)
    cell.net.isolate(reader.host)  # the tailing reader's own host
    writer.wait_acks(ledger, 200, timeout_s=60)  # entries the cut-off reader has to catch up on
    cell.net.heal(reader.host)
    writer.wait_acks(ledger, 100, timeout_s=60)
    writer.request("stop", ledger=ledger)
    last = writer.request("close", ledger=ledger)["last"]
    reader.wait_for(lambda e: e.get("tail_ended") == ledger, 60, "the tail to end after the close")
    assert reader.event("tail_error") == [] and reader.event("tail_failed") == []
    tailed = [e["tailed"][1] for e in reader.event("tailed")]
    out_of_order = [(i, t) for i, t in enumerate(tailed) if t != i][:10]
    in_order = tailed == list(range(last + 1))  # (compared apart: pytest's diff of 10,000 ids says less)
    assert in_order, f"the reader saw {len(tailed)} entries of 0..{last}; first out of place (index, entry): {out_of_order}"
    async with bkframe.open_client(cell.metadata, **FAST) as client:
        assert await check_ledger(client, ledger, writer.acked(ledger)) == last
