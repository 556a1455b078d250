"""The ZooKeeper store keeps the metadata-store contract, on a real ZooKeeper server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from bkframe_metadata_zk.store import SESSION_TIMEOUT_S, ZkMetadataStore
from kazoo.client import KazooClient

from bkframe.testing.faults.link_proxy import LinkFaults, LinkProxy
from bkframe.testing.metadata_contract import SharedMetadataStoreContract, ledger
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
        old = await holder.try_lock("ledger/9", "worker-1", 6, nursery)
        assert old is not None

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
        # The old holder's store works on (a new session) and can lock again; the stale
        # lock of the same name neither frees the new one nor makes it re-entrant.
        assert old.lost.is_set()
        new = await holder.try_lock("ledger/9", "worker-1", 6, nursery)
        assert new is not None and not new.lost.is_set()
        await old.release()
        assert await heir.lock_holder("ledger/9") == "worker-1"
        assert await holder.try_lock("ledger/9", "worker-1", 6, nursery) is None
        await new.release()
        assert await heir.lock_holder("ledger/9") is None
        await taken.release()
    finally:
        await holder.aclose()
        await heir.aclose()


async def test_locks_are_lost_when_zookeeper_is_out_of_reach(tmp_path: Path, nursery: trio.Nursery) -> None:
    """The holder cannot reach ZooKeeper: the server will expire its session (and give its
    locks to others) while the holder hears nothing, so the locks are ``lost`` once the
    connection has been suspended for a while, without waiting to reach the server again."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    store = ZkMetadataStore(f"zk://{server.address}/t-{uuid.uuid4().hex[:12]}")
    try:
        lock = await store.try_lock("auditor", "bookie-1", 6, nursery)
        assert lock is not None
        await trio.to_thread.run_sync(server.stop)
        with trio.fail_after(SESSION_TIMEOUT_S * 2):
            await lock.lost.wait()
        await trio.to_thread.run_sync(server.start)  # same data dir and port: the store reconnects
        with trio.fail_after(30):
            await lock.release()
    finally:
        server.stop()
        await store.aclose()


async def test_a_connection_lost_while_the_store_starts_is_retried(zk_server: ZooKeeperServer, nursery: trio.Nursery) -> None:
    """The server a client reached drops the connection while the store lays out its paths
    (a member killed or cut from its quorum; here a link proxy resets the connection): the
    start retries through the loss, as every later call does, instead of failing the open."""
    host, port = zk_server.address.rsplit(":", 1)
    proxy = LinkProxy((host, int(port)))
    _, proxy_port = await nursery.start(proxy.serve, "127.0.0.1", 0)
    slow = LinkFaults(latency_s=0.05)  # each of the layout's round trips takes 0.1 s
    proxy.set_faults(slow)
    store = ZkMetadataStore(f"zk://127.0.0.1:{proxy_port}/t-{uuid.uuid4().hex[:12]}")

    async def reset_once_connected() -> None:
        while not proxy.stats["bytes_down"]:  # the session's handshake answered
            await trio.sleep(0.005)
        await trio.sleep(0.05)  # the first path's request on its way
        proxy.set_faults(LinkFaults(latency_s=0.05, reset=True))
        await trio.sleep(0.3)
        proxy.set_faults(slow)

    nursery.start_soon(reset_once_connected)
    try:
        with trio.fail_after(30):
            first = await store.new_ledger_id()
        assert proxy.stats["resets"] >= 1
        assert await store.new_ledger_id() > first
    finally:
        await store.aclose()


async def cached_empty_buckets(store: ZkMetadataStore) -> tuple[str, str]:
    """Make and empty a ledger's buckets, so that ``store`` caches them; their two levels."""
    await store.create_ledger(ledger(7))
    await store.delete_ledger(7)
    parent = store._ledger(7).rsplit("/", 1)[0]
    grandparent = parent.rsplit("/", 1)[0]
    assert grandparent != store._ledgers_base(), "the layout has fewer levels than this test assumes"
    return parent, grandparent


async def test_a_create_whose_bucket_is_pruned_again_right_after_it_was_made(zk_server: ZooKeeperServer) -> None:
    """The race behind the soak's writer crash (kazoo's NoNodeError out of ``_ensure``): a
    listing elsewhere prunes the bucket again between the store making it and making the
    bucket below it. The store makes it once more and the create succeeds."""
    uri = f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"
    store = ZkMetadataStore(uri)
    other = KazooClient(hosts=zk_server.address)
    try:
        parent, grandparent = await cached_empty_buckets(store)
        await trio.to_thread.run_sync(lambda: other.start(timeout=10))
        await trio.to_thread.run_sync(lambda: (other.delete(parent), other.delete(grandparent)))
        real_create, pruned = store.zk.create, []

        def create(path: str, *args: Any, **kwargs: Any) -> Any:
            made = real_create(path, *args, **kwargs)
            if path == grandparent and not pruned:  # the other process's listing, just then
                pruned.append(path)
                other.delete(grandparent)
            return made

        store.zk.create = create  # type: ignore[method-assign]
        created = await store.create_ledger(ledger(8))
        assert pruned == [grandparent], "the race was not played"
        assert created.ledger_id == 8 and (await store.read_ledger(8)).ledger_id == 8
    finally:
        await trio.to_thread.run_sync(lambda: (other.stop(), other.close()))
        await store.aclose()


async def test_a_create_after_buckets_pruned_two_levels_deep(zk_server: ZooKeeperServer) -> None:
    """Another process's listing pruned the empty buckets above a ledger, two levels of
    them, after this store had cached that they exist: the next create makes them again
    (it once raised kazoo's NoNodeError, found by the 30-host soak)."""
    uri = f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"
    store = ZkMetadataStore(uri)
    try:
        parent, grandparent = await cached_empty_buckets(store)

        def prune() -> None:  # as a listing elsewhere would: the empty buckets, bottom up
            other = KazooClient(hosts=zk_server.address)
            other.start(timeout=10)
            other.delete(parent)
            other.delete(grandparent)
            other.stop()
            other.close()

        await trio.to_thread.run_sync(prune)
        created = await store.create_ledger(ledger(8))
        assert created.ledger_id == 8 and (await store.read_ledger(8)).ledger_id == 8
    finally:
        await store.aclose()


def test_a_missing_kazoo_is_a_clear_error_when_a_store_is_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """kazoo is imported when a zk:// store is opened (not by every process that loads the
    plugin); without it, opening says what to reinstall instead of a traceback."""
    import sys

    from bkframe import MetadataError
    from bkframe.core.plugin_manager import PluginManager

    pm = PluginManager()  # loads the plugin: nothing of kazoo is needed for that
    monkeypatch.delitem(sys.modules, "bkframe_metadata_zk.store", raising=False)
    for name in [m for m in sys.modules if m == "kazoo" or m.startswith("kazoo.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if kazoo were not installed
    reinstall = r"cannot import its client library.*pip install --force-reinstall bkframe-metadata-zk"
    with pytest.raises(MetadataError, match=reinstall):
        pm.metadata_store("zk://127.0.0.1:1/x")
