"""Recovery and BP-46 repair must never make data worse (issue 10, defects 4 and 11):
no corrupt copy spread over good ones, torn payloads re-copied, recovery-adds durable for
every ledger type, a lost disk's bookie adopting only the key metadata vouches for, and
limbo cleared only once the copies are durable."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio

import bkframe
from bkframe import DigestType, LedgerMetadata, LedgerStateName
from bkframe.autorecovery.data_integrity import LimboRepair
from bkframe.client.entry_format import Digester
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from bkframe.testing.kit import PASSWORD
from tests.autorecovery.test_bypass_journal import bypass_config, info, recover, wait_out_of_limbo

BYPASS_TYPE_ID = 2
#: Bookies that hold a journal group 5 s before its fsync, so "acknowledged but not synced"
#: lasts long enough to cut the power under it.
LOSSY = """
[bookie]
checkpoint_interval_s = 3600.0

[journal]
plugin = "journal_fs"
flush_when_queue_empty = false
max_wait_ms = 5000.0
buffered_bytes_threshold = 104857600
preallocate_bytes = 0
"""
SLOW = {"add_timeout_s": 30.0, "read_timeout_s": 30.0}


#: Not bkframe.testing.kit.payload: 60+ bytes, unique in an entry log file, which a test finds and zeroes in place.
def payload(ledger: int, i: int) -> bytes:
    return b"ledger-%d-entry-%d-" % (ledger, i) + b"x" * 40


async def test_repair_never_spreads_a_corrupt_copy(cluster_factory: Any) -> None:
    """An HMAC ledger's copies cannot be checked by a bookie (no password): its repair
    must not pick one replica's corrupt copy and recovery-add it over the good ones."""
    cluster = cluster_factory(3, config=bypass_config(True))
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="BYPASS_JOURNAL",
            digest=DigestType.HMAC_SHA256, password=PASSWORD,
        )
        lid = writer.ledger_id
        length = 0
        for i in range(10):
            await writer.append(payload(lid, i))
            length += len(payload(lid, i))
        ensemble = writer.metadata.fragments[0][1]
        # The tail entry's copy on the first replica of its write set goes bad (a valid
        # shape, a wrong MAC: what a bit flip or a forger leaves).
        good = Digester.for_ledger(DigestType.HMAC_SHA256, PASSWORD).encode(lid, 9, 8, length, payload(lid, 9))
        bad = good[:-1] + bytes([good[-1] ^ 0xFF])
        conn = await client.pool.get(ensemble[0])
        r = await conn.add(lid, 9, bad, master_key=master_key(PASSWORD), ledger_type=BYPASS_TYPE_ID)
        assert r.status == Status.OK
    # The writer is gone; another replica crashes and repairs the open ledger at boot.
    crashed = cluster.by_id(ensemble[1])
    crashed.kill()
    crashed.start(*cluster.bookie_args)
    async with bkframe.open_client(cluster.metadata) as client:
        # Give the repair time to try (it must refuse to decide on disagreeing copies).
        with trio.move_on_after(5):
            while "password" not in (await info(client, crashed.bookie_id))["repair"]["last_error"]:
                await trio.sleep(0.2)
        reader = await recover(client, lid)  # a client with the password: it can tell
        assert reader.metadata.last_entry_id == 9
        entries = await reader.read(0, 9)
        assert [e.payload for e in entries] == [payload(lid, i) for i in range(10)]
        # The good copies were never overwritten.
        check = Digester.for_ledger(DigestType.HMAC_SHA256, PASSWORD)
        for bookie_id in ensemble[1:]:
            r = await (await client.pool.get(bookie_id)).read(lid, 9, master_key=master_key(PASSWORD))
            assert r.status == Status.OK
            assert check.decode(lid, 9, bytes(r.data))[2] == payload(lid, 9), bookie_id
        await wait_out_of_limbo(client, crashed.bookie_id)


async def test_repair_recopies_a_torn_payload(cluster_factory: Any) -> None:
    """A record whose header survived a crash but whose payload did not is torn: the
    data-integrity check verifies the payload checksum and copies the entry again."""
    cluster = cluster_factory(3, config=bypass_config(True))
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(
            ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="BYPASS_JOURNAL", password=PASSWORD
        )
        lid = writer.ledger_id
        for i in range(10):
            await writer.append(payload(lid, i))
        md = await writer.close()
    victim = cluster.by_id(md.fragments[0][1][1])
    victim.kill()
    torn = 0
    for log_file in (victim.data_dir / "entrylogs").iterdir():
        data = log_file.read_bytes()
        if payload(lid, 7) in data:
            log_file.write_bytes(data.replace(payload(lid, 7), b"\0" * len(payload(lid, 7))))
            torn += 1
    assert torn == 1
    victim.start(*cluster.bookie_args)  # an unclean shutdown: the BYPASS ledger is repaired
    async with bkframe.open_client(cluster.metadata) as client:
        await wait_out_of_limbo(client, victim.bookie_id)
        r = await (await client.pool.get(victim.bookie_id)).read(lid, 7, master_key=master_key(PASSWORD))
        assert r.status == Status.OK
        assert Digester.for_ledger(DigestType.CRC32C, PASSWORD).decode(lid, 7, bytes(r.data))[2] == payload(lid, 7)


async def test_lost_disk_bookie_adopts_only_the_key_metadata_vouches_for(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=bypass_config(True))
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        lid = writer.ledger_id
        for i in range(5):
            await writer.append(payload(lid, i))
        lost = cluster.by_id(writer.metadata.fragments[0][1][0])
        lost.kill()
        shutil.rmtree(lost.data_dir)
        lost.start(*cluster.bookie_args)  # a new disk: every ledger fenced, keyless, in limbo
        with trio.fail_after(30):
            while True:
                try:
                    if lid in (await info(client, lost.bookie_id))["limbo_ledgers"]:
                        break
                except ConnectionError:
                    pass  # the old connection, to the dead process
                await trio.sleep(0.2)
        data = Digester.for_ledger(DigestType.CRC32C, PASSWORD).encode(lid, 4, 3, 0, payload(lid, 4))
        conn = await client.pool.get(lost.bookie_id)
        wrong = await conn.add(lid, 4, data, master_key=master_key(b"not the password"), recovery=True)
        assert wrong.status == Status.UNAUTHORIZED, wrong
        right = await conn.add(lid, 4, data, master_key=master_key(PASSWORD), recovery=True)
        assert right.status == Status.OK, right
        assert (await conn.read(lid, 4, master_key=master_key(PASSWORD))).status == Status.OK


@pytest.mark.parametrize(
    "ledger_type, first_written_back",
    # VD: nothing was synced, so the LAC is -1 and recovery writes back every entry.
    # BYPASS: the LAC is 18 (acks), so recovery writes back entry 19 only; entries up to
    # the LAC live in ledger storage alone and a power cut of every replica may lose
    # them, as BYPASS_JOURNAL says (BP-46 protects against one bookie's loss, not all).
    [("VD_JOURNAL", 0), ("BYPASS_JOURNAL", 19)],
)
async def test_recovery_closes_only_on_durable_write_backs(
    cluster_factory: Any, ledger_type: str, first_written_back: int
) -> None:
    """Recovery closes the ledger at the entries its recovery-adds wrote back; those must
    survive a power cut of every bookie, whatever the ledger type promised its writer."""
    cluster = cluster_factory(3, config=LOSSY, powerloss=True)
    async with bkframe.open_client(cluster.metadata, **SLOW) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD)
        lid = writer.ledger_id
        for i in range(20):
            await writer.append(payload(lid, i))
    # The writer is gone; a reader recovers and closes the ledger.
    async with bkframe.open_client(cluster.metadata, **SLOW) as client:
        with trio.fail_after(120):
            reader = await client.open_ledger(lid, password=PASSWORD)
        last = reader.metadata.last_entry_id
    assert last == 19
    for b in cluster.bookies:
        b.lose_power()
    for b in cluster.bookies:
        b.start(*cluster.bookie_args, powerloss=True)
    async with bkframe.open_client(cluster.metadata, **SLOW) as client:
        reader = await client.open_ledger(lid, password=PASSWORD)
        assert reader.metadata.state == LedgerStateName.CLOSED and reader.lac == last
        with trio.fail_after(60):
            entries = await reader.read(first_written_back, last)
        assert [e.payload for e in entries] == [payload(lid, i) for i in range(first_written_back, last + 1)]


async def test_limbo_is_cleared_only_after_the_copies_are_durable(tmp_path: Path, monkeypatch: Any) -> None:
    """The index header that clears limbo is mmap'd (the kernel may write it back at any
    time), so the copied entries must be checkpointed before limbo is cleared."""
    events: list[str] = []

    class Storage:
        def ledger_state(self, ledger_id: int) -> LedgerState:
            return LedgerState(ledger_id=ledger_id, master_key=b"k", limbo=True)

        def set_limbo(self, ledger_id: int, limbo: bool) -> None:
            events.append(f"limbo={limbo}")

    class Bookie:
        storage = Storage()
        repair_status: ClassVar[dict[str, Any]] = {"repaired_ledgers": 0, "entries_copied": 0, "last_error": ""}

        async def checkpoint(self) -> None:
            events.append("checkpoint")

    class Store:
        async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
            return LedgerMetadata(ledger_id, 3, 3, 2, ((0, ("a", "b", "c")),), state=LedgerStateName.CLOSED, last_entry_id=9)

    async def copy_missing(self: Any, pool: Any, md: LedgerMetadata) -> None:
        events.append("copied")

    monkeypatch.setattr(LimboRepair, "_copy_missing", copy_missing)
    repair = LimboRepair(Bookie(), Store(), "a")  # type: ignore[arg-type]

    class Context:
        pool = None

    assert await repair.repair(Context(), 1)  # type: ignore[arg-type]
    assert events.index("copied") < events.index("checkpoint") < events.index("limbo=False")
    assert events[-1] == "checkpoint"
