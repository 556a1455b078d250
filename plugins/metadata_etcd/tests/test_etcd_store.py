"""The etcd store keeps the metadata-store contract, on a real etcd server."""

from __future__ import annotations

import uuid

import pytest
import trio
from bkframe_metadata_etcd.store import EtcdMetadataStore

from bkframe.testing.metadata_contract import SharedMetadataStoreContract
from bkframe.testing.servers import EtcdServer


class TestEtcdStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, etcd_server: EtcdServer) -> str:
        return f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"


async def test_a_lock_whose_lease_ends_is_lost(etcd_server: EtcdServer, nursery: trio.Nursery) -> None:
    """The holder's lease ends under it (revoked here, as etcd does when keep-alives stop
    arriving for a TTL): the key is gone, the holder's next keep-alive sets ``lost`` and
    another client takes the lock; the old holder's release leaves the new lock alone."""
    uri = f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"
    holder, heir = EtcdMetadataStore(uri), EtcdMetadataStore(uri)
    try:
        lock = await holder.try_lock("auditor", "bookie-1", 3, nursery)
        assert lock is not None and await heir.lock_holder("auditor") == "bookie-1"
        await heir._call(lambda c: c.post(c.get_url("/kv/lease/revoke"), json={"ID": lock._lease.id}))
        with trio.fail_after(10):
            await lock.lost.wait()
        taken = await heir.try_lock("auditor", "bookie-2", 3, nursery)
        assert taken is not None
        await lock.release()
        assert await holder.lock_holder("auditor") == "bookie-2"
        await trio.sleep(4)  # past the old TTL: the heir's keep-alive holds it
        assert await holder.lock_holder("auditor") == "bookie-2" and not taken.lost.is_set()
        await taken.release()
    finally:
        await holder.aclose()
        await heir.aclose()
