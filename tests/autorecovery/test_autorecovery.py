"""Autorecovery on real bookie processes: a lost bookie's ledgers return to full
replication by themselves (byte-identical replicas, readers never failing), on sqlite,
ZooKeeper and etcd."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

import bkframe
from bkframe import Client, DigestType, LedgerMetadata
from bkframe.client.distribution import replicas
from bkframe.client.entry_format import Digester
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD, wait_until

ENTRIES = 40


def autorecovery_config(**overrides: Any) -> str:
    """Every bookie runs autorecovery, with graces short enough for a test."""
    keys = {
        "enabled": True,
        "lost_bookie_grace_s": 1.0,
        "open_ledger_rereplication_grace_s": 3.0,
        "check_interval_s": 0.3,
        "lock_ttl_s": 3.0,
        "request_timeout_s": 10.0,
        "max_retry_s": 2.0,
        "audit_interval_s": 0.0,
        **overrides,
    }
    lines = "\n".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in keys.items())
    return f"[bookie]\nregistration_ttl_s = 2.0\n\n[autorecovery]\n{lines}\n"


@pytest.fixture(params=["sqlite", "zookeeper", "etcd"])
def metadata_uri(request: pytest.FixtureRequest, tmp_path: Any) -> str | None:
    """None: the cluster's own sqlite store."""
    root = f"ar-{uuid.uuid4().hex[:12]}"
    if request.param == "zookeeper":
        return f"zk://{request.getfixturevalue('zk_server').address}/{root}"
    if request.param == "etcd":
        return f"etcd://{request.getfixturevalue('etcd_server').address}/{root}"
    return None


#: Not bkframe.testing.kit.payload: reproducible sizes from 1 to 40 repeats, so copies span frames.
def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"ledger {ledger_id} entry {entry_id};".encode() * random.Random(ledger_id * 1000 + entry_id).randint(1, 40)


async def write_ledgers(client: Client, count: int) -> tuple[dict[int, Any], list[Any]]:
    """``count`` ledgers, E=3 W=3 A=2 and E=3 W=2 A=2, half closed; the open ones' writers
    are returned (kept open, idle: their writer is "gone" for autorecovery)."""
    written: dict[int, Any] = {}
    open_writers = []
    for i in range(count):
        w = 3 if i % 2 == 0 else 2
        writer = await client.create_ledger(ensemble=3, write_quorum=w, ack_quorum=2, password=PASSWORD)
        await writer.append_many([payload(writer.ledger_id, e) for e in range(ENTRIES)])
        await writer.flush()
        if i % 4 < 2:
            await writer.close()
        else:
            open_writers.append(writer)
        written[writer.ledger_id] = writer
    return written, open_writers


async def read_forever(client: Client, ledger_ids: list[int], errors: list[str], rounds: list[int]) -> None:
    """Read every ledger again and again (without recovery), as a reader would."""
    while True:
        for ledger_id in ledger_ids:
            try:
                handle = await client.open_ledger(ledger_id, password=PASSWORD, recovery=False)
                last = handle.lac
                if last >= 0:
                    entries = await handle.read(0, last)
                    for e in entries:
                        if e.payload != payload(ledger_id, e.entry_id):
                            errors.append(f"ledger {ledger_id} entry {e.entry_id}: wrong payload")
            except Exception as e:  # noqa: BLE001 - any error a reader sees is a failure of the test
                errors.append(f"ledger {ledger_id}: {e!r}")
        rounds[0] += 1
        await trio.sleep(0.05)


async def wait_fully_replicated(client: Client, ledger_ids: list[int], lost: set[str], timeout_s: float) -> None:
    """Until no ledger names a lost bookie (an open ledger that did is then closed: its
    writer was idle past the grace, so autorecovery recovered it)."""
    left: list[LedgerMetadata] = []

    async def repaired() -> bool:
        nonlocal left
        left = [md for md in [await client.ledger_metadata(i) for i in ledger_ids] if md.bookies() & lost]
        return not left

    try:
        await wait_until(repaired, "the ledgers repaired", timeout_s, every_s=0.5)
    except AssertionError:
        details = "; ".join(f"ledger {md.ledger_id} {md.state.value} {md.fragments}" for md in left[:5])
        raise AssertionError(f"not repaired within {timeout_s} s: {details}") from None


async def wait_no_marks(client: Client, timeout_s: float = 30.0) -> None:
    """Until no ledger is marked under-replicated: a worker removes its mark after it has
    updated the metadata, and an audit that ran meanwhile may mark a ledger the metadata no
    longer puts on the lost bookie (a worker then finds it whole and unmarks it)."""
    status: list[Any] = []

    async def unmarked() -> bool:
        nonlocal status
        status = await client.metadata.list_under_replicated()
        return not status

    try:
        await wait_until(unmarked, "no ledger marked under-replicated", timeout_s, every_s=0.5)
    except AssertionError:
        raise AssertionError(f"still marked under-replicated after {timeout_s} s: {status}") from None


async def check_replicas(client: Client, ledger_ids: list[int]) -> None:
    """Every entry is on each of its W bookies (read from each one directly), byte-identical,
    with the payload that was written."""
    digester = Digester.for_ledger(DigestType.CRC32C, PASSWORD)
    for ledger_id in ledger_ids:
        md = await client.ledger_metadata(ledger_id)
        assert md.last_entry_id == (ENTRIES - 1 if md.closed else -1), md
        bounds = [first for first, _ in md.fragments[1:]] + [ENTRIES]
        for (first, ensemble), end in zip(md.fragments, bounds):
            for entry_id in range(first, end):
                copies = {}
                for bookie_id in replicas(ensemble, entry_id, md.write_quorum):
                    conn = await client.pool.get(bookie_id)
                    r = await conn.read(ledger_id, entry_id, timeout_s=10, master_key=master_key(PASSWORD))
                    assert r.status == Status.OK, f"ledger {ledger_id} entry {entry_id} on {bookie_id}: {r.status.name}"
                    copies[bookie_id] = bytes(r.data)
                assert len(set(copies.values())) == 1, f"ledger {ledger_id} entry {entry_id}: replicas differ"
                _, _, data = digester.decode(ledger_id, entry_id, next(iter(copies.values())))
                assert bytes(data) == payload(ledger_id, entry_id)


def victim_of(cluster: Cluster, mds: list[LedgerMetadata]) -> str:
    """The bookie in the most ledgers."""
    counts = {b.bookie_id: sum(b.bookie_id in md.bookies() for md in mds) for b in cluster.bookies}
    return max(counts, key=lambda b: counts[b])


async def test_lost_bookie_ledgers_return_to_full_replication(cluster_factory: Any, metadata_uri: str | None) -> None:
    cluster = cluster_factory(5, metadata=metadata_uri, config=autorecovery_config())
    async with bkframe.open_client(cluster.metadata) as writers, bkframe.open_client(cluster.metadata) as readers:
        written, _open = await write_ledgers(writers, 20)
        ledger_ids = sorted(written)
        mds = [await writers.ledger_metadata(i) for i in ledger_ids]
        victim = victim_of(cluster, mds)
        on_victim = [md.ledger_id for md in mds if victim in md.bookies()]
        assert len(on_victim) >= 5
        assert any(not md.closed for md in mds if md.ledger_id in on_victim)
        errors: list[str] = []
        rounds = [0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_forever, readers, ledger_ids, errors, rounds)
            proc = cluster.by_id(victim)
            proc.kill()
            shutil.rmtree(proc.data_dir)  # its disk is gone for good
            await wait_fully_replicated(writers, ledger_ids, {victim}, timeout_s=120)
            seen = rounds[0]
            while rounds[0] < seen + 2:  # readers go on with the new metadata too
                await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        assert not errors, errors[:10]
        await check_replicas(writers, ledger_ids)
        assert all([(await writers.ledger_metadata(i)).closed for i in on_victim])
        await wait_no_marks(writers)


async def test_full_check_finds_a_replica_that_lost_its_entries(cluster_factory: Any) -> None:
    """A bookie comes back on an empty disk within the lost-bookie grace (cookie re-stamped,
    BP-46 protection off, so nothing repairs it): only the full check (LIST_ENTRIES on every
    replica) can see its ledgers lack entries; they are marked and re-replicated."""
    config = autorecovery_config(lost_bookie_grace_s=300.0, audit_interval_s=2.0)
    config = config.replace("[bookie]\n", "[bookie]\nauto_fix_cookies = true\ndata_loss_protection = false\n")
    cluster = cluster_factory(5, config=config)
    async with bkframe.open_client(cluster.metadata) as client:
        ledger_ids = []
        for i in range(6):
            writer = await client.create_ledger(ensemble=3, write_quorum=3 if i % 2 else 2, ack_quorum=2, password=PASSWORD)
            await writer.append_many([payload(writer.ledger_id, e) for e in range(ENTRIES)])
            await writer.close()
            ledger_ids.append(writer.ledger_id)
        mds = [await client.ledger_metadata(i) for i in ledger_ids]
        victim = victim_of(cluster, mds)
        proc = cluster.by_id(victim)
        proc.kill()
        shutil.rmtree(proc.data_dir)
        proc.start(*cluster.bookie_args)  # back at once, empty
        await wait_fully_replicated(client, ledger_ids, {victim}, timeout_s=90)
        await check_replicas(client, ledger_ids)
        await wait_no_marks(client)


async def test_rereplication_keeps_write_sets_on_three_racks(cluster_factory: Any) -> None:
    """Six bookies in three racks, every bookie's [placement] rack-aware with min_racks = 3:
    the copies of a lost bookie's fragments go where every write set still spans three racks
    (the other bookie of its rack: a random choice would be right one time in four)."""
    from bkframe.core.interfaces.placement import racks_spanned

    racks_by_index = ("rack-a", "rack-b", "rack-c")
    config = autorecovery_config() + '\n[placement]\npolicy = "rack_aware"\nmin_racks = 3\n'
    cluster = cluster_factory(6, config=config, racks=racks_by_index)
    async with bkframe.open_client(cluster.metadata, placement="rack_aware", min_racks=3) as client:
        racks = {b.bookie_id: b.rack for b in await client.metadata.list_bookies()}
        ledger_ids = []
        for _ in range(6):
            writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
            await writer.append_many([payload(writer.ledger_id, e) for e in range(ENTRIES)])
            await writer.close()
            ledger_ids.append(writer.ledger_id)
        mds = [await client.ledger_metadata(i) for i in ledger_ids]
        assert all(racks_spanned([racks[b] for b in md.fragments[0][1]], 3) == 3 for md in mds)
        victim = victim_of(cluster, mds)
        proc = cluster.by_id(victim)
        proc.kill()
        shutil.rmtree(proc.data_dir)
        await wait_fully_replicated(client, ledger_ids, {victim}, timeout_s=90)
        for ledger_id in ledger_ids:
            md = await client.ledger_metadata(ledger_id)
            for _, ensemble in md.fragments:
                assert racks_spanned([racks[b] for b in ensemble], 3) == 3, md.fragments
        await check_replicas(client, ledger_ids)


async def test_a_lost_bookies_fragment_goes_to_a_bookie_holding_another_fragment(
    cluster_factory: Any, tmp_path: Path
) -> None:
    """Four bookies, a ledger on three that changed ensemble when one died: the dead one's
    first fragment can go only to the bookie that took its place in the second, which holds
    the ledger with its key already. A standalone ``bkframe autorecovery`` knows no key: its
    keyless copy is taken there (it was refused, and the ledger stayed under-replicated for
    good: short soak, seed 4)."""
    config = autorecovery_config()
    cluster = cluster_factory(4, config=config.replace("enabled = true", "enabled = false"))
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        half = ENTRIES // 2
        await writer.append_many([payload(writer.ledger_id, e) for e in range(half)])
        await writer.flush()
        first = (await client.ledger_metadata(writer.ledger_id)).fragments[0][1]
        victim = first[2]
        (spare,) = {b.bookie_id for b in cluster.bookies} - set(first)
        proc = cluster.by_id(victim)
        proc.kill()
        shutil.rmtree(proc.data_dir)
        await writer.append_many([payload(writer.ledger_id, e) for e in range(half, ENTRIES)])
        await writer.close()
        md = await client.ledger_metadata(writer.ledger_id)
        assert len(md.fragments) == 2 and spare in md.fragments[1][1], md.fragments
        (tmp_path / "ar.toml").write_text(config)
        log_path = tmp_path / "ar.log"
        with open(log_path, "ab") as out:
            service = subprocess.Popen(
                [sys.executable, "-m", "bkframe", "autorecovery", "--metadata", cluster.metadata,
                 "--config", str(tmp_path / "ar.toml")],
                stdout=out, stderr=subprocess.STDOUT,
            )
        try:
            await wait_fully_replicated(client, [writer.ledger_id], {victim}, timeout_s=60)
        except AssertionError as e:
            raise AssertionError(f"{e}\nautorecovery's log:\n{log_path.read_text(errors='replace')[-3000:]}") from None
        finally:
            service.terminate()
            service.wait(10)
        md = await client.ledger_metadata(writer.ledger_id)
        assert spare in md.fragments[0][1], md.fragments
        await check_replicas(client, [writer.ledger_id])
        await wait_no_marks(client)
