"""The ZooKeeper store keeps the metadata-store contract, on a real ZooKeeper server."""

from __future__ import annotations

import uuid

import pytest
import trio
from bkframe_metadata_zk.store import ZkMetadataStore
from kazoo.client import KazooClient

from bkframe.testing.metadata_contract import SharedMetadataStoreContract
from bkframe.testing.servers import ZooKeeperServer


class TestZkStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, zk_server: ZooKeeperServer) -> str:
        return f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"


async def test_locks_are_lost_with_the_session(zk_server: ZooKeeperServer, nursery: trio.Nursery) -> None:
    """The holder's ZooKeeper session expires (here: another client joins it and closes it,
    as the server does when the holder is partitioned away too long): its locks are
    ``lost``, their nodes gone, and another client takes them."""
    uri = f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"
    holder, heir = ZkMetadataStore(uri), ZkMetadataStore(uri)
    try:
        lock = await holder.try_lock("ledger/7", "worker-1", 6, nursery)
        assert lock is not None and await heir.lock_holder("ledger/7") == "worker-1"

        def end_session() -> None:
            twin = KazooClient(hosts=zk_server.address, client_id=holder.zk.client_id)
            twin.start(timeout=10)
            twin.stop()
            twin.close()

        await trio.to_thread.run_sync(end_session)
        with trio.fail_after(20):
            await lock.lost.wait()
            while (taken := await heir.try_lock("ledger/7", "worker-2", 6, nursery)) is None:
                await trio.sleep(0.1)
        await lock.release()  # the old holder's release leaves the new node alone
        assert await heir.lock_holder("ledger/7") == "worker-2"
        # The old holder's store works on (a new session) and can lock other names.
        other = await holder.try_lock("ledger/8", "worker-1", 6, nursery)
        assert other is not None and not other.lost.is_set()
        await other.release()
        await taken.release()
    finally:
        await holder.aclose()
        await heir.aclose()
