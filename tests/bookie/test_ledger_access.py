"""Ledger access (issue 26, part 1), repeated on real bookie processes as an attacker on
loopback with bkframe's own wire protocol would try it:

- a READ / READ_BATCH without the ledger's key, or with another, gets UNAUTHORIZED and no
  entry bytes; the honest client with the password reads everything;
- a fencing READ with an arbitrary key of a ledger id not created yet makes nothing: the
  next ``create_ledger`` gets that id and its appends work;
- the same on a named log's open segment: refused, and the log goes on (never stuck
  IN_RECOVERY);
- a keyless copy (recovery add without a key) is taken only from the cluster's own
  processes (AUTH ``bkframe-internal`` with the cluster's secret), whose reads need no key;
- ``[auth] readers`` principals read any ledger; others of the same provider do not.

The bookies are shared by the module's tests: each uses ledgers and logs of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import bkframe
from bkframe import LedgerStateName
from bkframe.bookie.key_check import KeyCheck
from bkframe.client.bookies.connection import BookieClient, connect_bookie
from bkframe.core.interfaces.auth import internal_credential
from bkframe.core.ledger_keys import master_key, password_hash
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import MetadataError, UnauthorizedError
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.proto.table import Response
from bkframe.testing.cluster import Cluster, make_config, running_bookie
from bkframe.testing.kit import PASSWORD, payload

STRANGER_KEY = master_key(b"guessed")


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: Callable[..., Cluster]) -> Cluster:
    return module_cluster_factory(3)


async def cluster_record(uri: str) -> ClusterRecord:
    store = PluginManager().metadata_store(uri)
    try:
        record = await store.read_cluster()
    finally:
        await store.aclose()
    assert record is not None
    return record


async def on_every_bookie(cluster: Cluster, ask: Callable[[BookieClient], object], **connect: object) -> list[Response]:
    answers = []
    for b in cluster.bookies:
        async with connect_bookie(b.host, b.port, **connect) as conn:  # type: ignore[arg-type]
            answers.append(await ask(conn))  # type: ignore[misc]
    return answers


async def ledger_counts(cluster: Cluster) -> list[int]:
    counts = []
    for b in cluster.bookies:
        async with connect_bookie(b.host, b.port) as conn:
            counts.append((await conn.info())["ledgers"])
    return counts


async def test_no_entry_bytes_leave_without_the_key(cluster: Cluster) -> None:
    entries = [payload("secret", i, size=64) for i in range(10)]
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for data in entries:
            await writer.append(data)
        ledger_id = writer.ledger_id  # left open: the attacker reads while it is written
        for key in (b"", STRANGER_KEY):
            for b in cluster.bookies:
                async with connect_bookie(b.host, b.port) as conn:
                    read = await conn.read(ledger_id, 3, master_key=key)
                    batch = await conn.submit_read_batch(ledger_id, 0, 9, master_key=key).wait()
                    assert (read.status, batch.status) == (Status.UNAUTHORIZED, Status.UNAUTHORIZED), (read, batch)
                    assert not read.data and not batch.entries
                    assert entries[3] not in read.message.encode() + batch.message.encode()
                    # What carries no entry bytes stays open, as in BookKeeper.
                    lac = await conn.read_lac(ledger_id)
                    listed = await conn.submit_list_entries(ledger_id, 0, 9).wait()
                    assert (lac.status, listed.status, listed.runs) == (Status.OK, Status.OK, ((0, 9),))
        # The honest reader (the password) reads it all, raw or through the client.
        for b in cluster.bookies:
            async with connect_bookie(b.host, b.port) as conn:
                keyed = await conn.submit_read_batch(ledger_id, 0, 9, master_key=master_key(PASSWORD)).wait()
                assert keyed.status == Status.OK and len(keyed.entries) == 10
        await writer.close()
        reader = await client.open_ledger(ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 9)] == entries
        with pytest.raises(UnauthorizedError):
            await client.open_ledger(ledger_id, password=b"guessed")


async def test_a_fence_of_a_ledger_not_created_yet_makes_nothing(cluster: Cluster) -> None:
    async with bkframe.open_client(cluster.metadata) as client:
        before = await ledger_counts(cluster)
        upcoming = max(await client.list_ledgers(), default=0) + 1
        guesses = range(upcoming, upcoming + 5)
        for ledger_id in guesses:
            for fenced in await on_every_bookie(
                cluster, lambda conn, i=ledger_id: conn.read(i, LAST_ENTRY, master_key=STRANGER_KEY, fence=True)
            ):
                assert fenced.status == Status.NO_LEDGER and "does not exist in the metadata store" in fenced.message
            # A first add of it is refused the same way.
            for added in await on_every_bookie(cluster, lambda conn, i=ledger_id: conn.add(i, 0, b"x", master_key=STRANGER_KEY)):
                assert added.status == Status.NO_LEDGER, added
        assert await ledger_counts(cluster) == before
        # The next ledger gets one of those ids, and works.
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        assert writer.ledger_id in guesses
        for i in range(20):
            await writer.append(payload(writer.ledger_id, i))
        # Its key is in the metadata now, and the attacker's is still not it.
        refused = await on_every_bookie(
            cluster, lambda conn: conn.read(writer.ledger_id, LAST_ENTRY, master_key=STRANGER_KEY, fence=True)
        )
        assert {r.status for r in refused} == {Status.UNAUTHORIZED}
        await writer.append(payload(writer.ledger_id, 20))
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 20)] == [payload(writer.ledger_id, i) for i in range(21)]


async def test_a_fence_of_a_named_logs_open_segment_leaves_the_log_usable(cluster: Cluster) -> None:
    async with bkframe.open_client(cluster.metadata) as client:
        await client.logs.create("access-log", password=PASSWORD, ensemble=3, write_quorum=3, ack_quorum=2)
        writer = await client.logs.open_writer("access-log", password=PASSWORD)
        record = await client.logs.metadata("access-log")
        # Before the segment's first append no bookie holds it: the fences would have made it.
        targets = [record.segments[-1].ledger_id, *record.spares]
        for ledger_id in targets:
            answers = await on_every_bookie(
                cluster, lambda conn, i=ledger_id: conn.read(i, LAST_ENTRY, master_key=STRANGER_KEY, fence=True)
            )
            assert {r.status for r in answers} == {Status.UNAUTHORIZED}, answers
        for i in range(10):
            await writer.append(payload("log", i))
        # A second writer recovers the first one's segment, and goes on.
        second = await client.logs.open_writer("access-log", password=PASSWORD)
        await second.append(payload("log", 10))
        await second.close()
        record = await client.logs.metadata("access-log")
        states = [(await client.ledger_metadata(s.ledger_id)).state for s in record.segments]
        assert states and all(state == LedgerStateName.CLOSED for state in states), states
        reader = await client.logs.reader("access-log", password=PASSWORD)
        assert [e.payload for e in await reader.read("earliest")] == [payload("log", i) for i in range(11)]


async def test_keyless_copies_and_reads_only_for_the_clusters_own(cluster: Cluster) -> None:
    secret = (await cluster_record(cluster.metadata)).secret
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await writer.append(b"shared")
        await writer.close()
        spare = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await spare.close()  # closed empty: no bookie holds it
    b = cluster.bookies[0]
    async with connect_bookie(b.host, b.port) as stranger:
        copy = await stranger.add(spare.ledger_id, 0, b"forged", master_key=b"", recovery=True)
        assert copy.status == Status.UNAUTHORIZED and "bkframe-internal" in copy.message
    with pytest.raises(UnauthorizedError, match="not this cluster's secret"):
        async with connect_bookie(b.host, b.port, auth=internal_credential(os.urandom(32))):
            pass
    async with connect_bookie(b.host, b.port, auth=internal_credential(secret)) as own:
        assert (await own.read(writer.ledger_id, 0)).data.endswith(b"shared")
        batch = await own.submit_read_batch(writer.ledger_id, 0, 0).wait()
        assert batch.status == Status.OK and len(batch.entries) == 1
        copy = await own.add(spare.ledger_id, 0, b"copied", master_key=b"", recovery=True)
        assert copy.status == Status.OK, copy


TOKENS = 'tokens = ["writer-token", "backup-token"]'


async def test_readers_read_any_ledger(tmp_path: Path, cluster_factory: Callable[..., Cluster]) -> None:
    config = f'[auth]\nprovider = "token"\n{TOKENS}\nreaders = ["token #1"]\n'
    readers = cluster_factory(1, config=config)
    async with bkframe.open_client(readers.metadata, auth_token="writer-token") as client:
        writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        await writer.append(b"backed up")
        await writer.close()
    b = readers.bookies[0]
    async with connect_bookie(b.host, b.port, auth=("token", b"writer-token")) as plain:
        assert (await plain.read(writer.ledger_id, 0)).status == Status.UNAUTHORIZED
    async with connect_bookie(b.host, b.port, auth=("token", b"backup-token")) as backup:
        assert (await backup.read(writer.ledger_id, 0)).data.endswith(b"backed up")


async def test_a_store_that_cannot_answer_makes_nothing(tmp_path: Path) -> None:
    """The metadata store does not answer the key check of a ledger's first add or fence:
    the request gets IO_ERROR (the client retries or moves on), and nothing is made."""

    class Unreachable:
        uri = "sqlite:///unreachable"

        async def read_ledger(self, ledger_id: int) -> object:
            raise MetadataError("metadata store sqlite:///unreachable: down")

    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    async with running_bookie(make_config(tmp_path / "bookie", metadata=uri)) as (service, host, port):
        assert service.bookie is not None
        service.bookie.key_check = KeyCheck(Unreachable())  # type: ignore[arg-type]
        async with connect_bookie(host, port) as conn:
            add = await conn.add(5, 0, b"x", master_key=STRANGER_KEY)
            fence = await conn.read(6, LAST_ENTRY, master_key=STRANGER_KEY, fence=True)
            for r in (add, fence):
                assert r.status == Status.IO_ERROR and "retry" in r.message, r
        assert service.bookie.storage.ledger_state(5) is None and service.bookie.storage.ledger_state(6) is None


async def test_key_checks_share_one_read_and_remember_the_hash() -> None:
    reads: list[int] = []

    class Store:
        uri = "memory://counting"

        async def read_ledger(self, ledger_id: int) -> bkframe.LedgerMetadata:
            reads.append(ledger_id)
            await trio.sleep(0.05)
            return bkframe.LedgerMetadata(
                ledger_id, 1, 1, 1, ((0, ("b",)),), password_hash=password_hash(PASSWORD)  # type: ignore[arg-type]
            )

    check = KeyCheck(Store(), cache_size=2)  # type: ignore[arg-type]
    verdicts = []

    async def ask(key: bytes) -> None:
        verdicts.append((await check.check(1, key)).value)

    async with trio.open_nursery() as nursery:
        for key in (master_key(PASSWORD),) * 5 + (STRANGER_KEY,):
            nursery.start_soon(ask, key)
    assert reads == [1] and sorted(verdicts) == ["match"] * 5 + ["wrong key"]
    assert check.cached(1, master_key(PASSWORD)) is not None
    for ledger_id in (2, 3):
        await check.check(ledger_id, STRANGER_KEY)
    assert check.cached(1, master_key(PASSWORD)) is None  # bounded: the oldest went
