"""The etcd store keeps the metadata-store contract, on a real etcd server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from bkframe_metadata_etcd import autorecovery as autorecovery_module
from bkframe_metadata_etcd.store import EtcdMetadataStore

from bkframe.errors import MetadataError
from bkframe.testing.kit import wait_until
from bkframe.testing.metadata_contract import SharedMetadataStoreContract
from bkframe.testing.servers import EtcdServer


class TestEtcdStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, etcd_server: EtcdServer) -> str:
        return f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"


def count_keep_alives(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Per lease id, the keep-alives etcd answered with the lease alive (from now on)."""
    counts: dict[int, int] = {}
    keep_alive = autorecovery_module.keep_alive

    def counted(client: Any, lease_id: int, timeout_s: float) -> int:
        left = keep_alive(client, lease_id, timeout_s)
        if left > 0:
            counts[lease_id] = counts.get(lease_id, 0) + 1
        return left

    monkeypatch.setattr(autorecovery_module, "keep_alive", counted)
    return counts


async def test_a_lock_whose_lease_ends_is_lost(
    etcd_server: EtcdServer, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's lease ends under it (revoked here, as etcd does when keep-alives stop
    arriving for a TTL): the key is gone, the holder's next keep-alive sets ``lost`` and
    another client takes the lock; the old holder's release leaves the new lock alone."""
    uri = f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"
    holder, heir = EtcdMetadataStore(uri), EtcdMetadataStore(uri)
    try:
        renewed = count_keep_alives(monkeypatch)
        lock = await holder.try_lock("auditor", "bookie-1", 3, nursery)
        assert lock is not None and await heir.lock_holder("auditor") == "bookie-1"
        await heir._call(lambda c: c.post(c.get_url("/kv/lease/revoke"), json={"ID": lock._lease.id}))
        with trio.fail_after(10):
            await lock.lost.wait()
        taken = await heir.try_lock("auditor", "bookie-2", 3, nursery)
        assert taken is not None
        await lock.release()
        assert await holder.lock_holder("auditor") == "bookie-2"
        # Past the old TTL: the heir's keep-alives hold it (four, one every third of the TTL).
        lease = taken._lease.id  # type: ignore[attr-defined]
        await wait_until(lambda: renewed.get(lease, 0) >= 4, "four keep-alives of the heir's lease", 30)
        assert await holder.lock_holder("auditor") == "bookie-2" and not taken.lost.is_set()
        await taken.release()
    finally:
        await holder.aclose()
        await heir.aclose()


async def test_a_lock_is_lost_when_etcd_is_out_of_reach(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No keep-alive gets through for a TTL (etcd is down): the lock is ``lost``, since the
    lease may have ended and the lock gone to another."""
    server = EtcdServer(tmp_path / "etcd").start()
    store = EtcdMetadataStore(f"etcd://{server.address}/t-{uuid.uuid4().hex[:12]}")
    renewed = count_keep_alives(monkeypatch)
    try:
        lock = await store.try_lock("auditor", "bookie-1", 2, nursery)
        assert lock is not None
        lease = lock._lease.id  # type: ignore[attr-defined]
        await wait_until(lambda: renewed.get(lease, 0) >= 2, "two keep-alives", 30)  # kept alive meanwhile
        assert not lock.lost.is_set()
        await trio.to_thread.run_sync(server.stop)
        with trio.fail_after(6):
            await lock.lost.wait()
        with trio.fail_after(10):
            await lock.release()  # etcd is still down: logged, not raised
    finally:
        server.stop()
        await store.aclose()


async def test_a_full_space_quota_is_a_clear_error(tmp_path: Path) -> None:
    """etcd over its ``--quota-backend-bytes`` refuses every write (NOSPACE): the store says
    what is wrong and what to do at once, instead of retrying as if etcd were out of reach."""
    server = EtcdServer(tmp_path / "etcd", quota_backend_bytes=1 << 20).start()
    store = EtcdMetadataStore(f"etcd://{server.address}/t-{uuid.uuid4().hex[:12]}")
    try:
        await store.create_log("big", b"x")
        value = bytes(200_000)  # no compression: each rewrite is a 200 KB revision
        with trio.fail_after(60), pytest.raises(MetadataError) as caught:
            version = 1
            for _ in range(100):
                version = await store.update_log("big", value + bytes([version % 256]), version)
        message = str(caught.value)
        assert "space quota is full" in message and "--quota-backend-bytes" in message and "compact" in message
        # Reads still work. The write that met the quota may be stored after all: an attempt
        # that timed out on this loaded machine, applied, then retried into NOSPACE.
        assert (await store.read_log("big")).version in (version, version + 1)
    finally:
        await store.aclose()
        server.stop()
