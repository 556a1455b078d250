"""The ZooKeeper store's layout holds up at scale: ledgers and the bookie index in a
hierarchy of at most 10^4 children per node, listed in order and in pages; list_bookies in a
bounded number of requests however many bookies there are; a store of the old flat layout
refused at start."""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from bkframe_metadata_zk.layout import MAX_ID, leaf_path, walk
from bkframe_metadata_zk.store import ZkMetadataStore
from kazoo.client import KazooClient

from bkframe.common.cluster_record import init_cluster
from bkframe.core.metadata import BookieInfo, ClusterRecord, LedgerMetadata
from bkframe.testing.servers import ZooKeeperServer


def test_ids_map_to_buckets_of_at_most_10k_children_walked_in_order() -> None:
    """25,000 ids, dense across bucket bounds and spread over the whole id space: no node
    of the tree they make has more than 10^4 children, and walking it from any start, in
    pages of any size, gives the ids in order."""
    assert leaf_path("/r", 123_456_789) == "/r/000/0000/0001/2345/L6789"
    assert leaf_path("/r", 2**63 - 1) == "/r/922/3372/0368/5477/L5807"
    assert leaf_path("/r", MAX_ID) == "/r/999/9999/9999/9999/L9999"
    rng = random.Random(27)
    ids = sorted({*range(1, 20_001), *(rng.randrange(MAX_ID) for _ in range(4_000)), *range(10**8 - 500, 10**8 + 500)})
    tree: dict[str, set[str]] = defaultdict(set)
    for ledger_id in ids:
        path = leaf_path("/r", ledger_id)
        while path != "/r":
            parent, name = path.rsplit("/", 1)
            tree[parent].add(name)
            path = parent
    assert len(ids) > 24_000 and max(len(children) for children in tree.values()) == 10_000
    tree["/r/000/0000/0000"].add("0009")  # an emptied bucket: walked past and reported
    tree["/r/000/0000/0000/0009"] = set()
    tree["/r/000/0000"].add("0000x")  # a name of no layout's: left alone
    tree["/r"].add("L0000000000000000001")  # the old flat layout's: left alone too
    empty: list[str] = []

    def children(path: str) -> list[str] | None:
        return list(tree[path]) if path in tree else None

    assert walk(children, "/r", start=0, limit=None, on_empty=empty.append) == ids
    assert empty == ["/r/000/0000/0000/0009"]
    for start in (0, 9_999, 10_000, 10**8 - 1, ids[-100], MAX_ID):
        later = [i for i in ids if i >= start]
        for page in (1, 3, 10_001):
            assert walk(children, "/r", start=start, limit=page) == later[:page]
    assert walk(children, "/r", start=5, limit=0) == [] and walk(children, "/missing", start=0, limit=None) == []


@pytest.fixture
def uri(zk_server: ZooKeeperServer) -> str:
    return f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw(zk_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain kazoo client, to look at the nodes the store made."""
    client = KazooClient(hosts=zk_server.address)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
async def store(uri: str) -> AsyncIterator[ZkMetadataStore]:
    s = ZkMetadataStore(uri)
    yield s
    await s.aclose()


def tree_stats(raw: KazooClient, path: str) -> Iterator[tuple[str, int]]:
    """(path, number of children) of every node under ``path``."""
    children = raw.get_children(path)
    yield path, len(children)
    for child in children:
        yield from tree_stats(raw, f"{path}/{child}")


async def test_ledgers_and_their_index_live_in_the_hierarchy(store: ZkMetadataStore, raw: KazooClient) -> None:
    """Ledgers and index entries sit at their hierarchical paths (nothing flat under
    ``ledgers``); a bucket emptied by deletes is pruned by the next listing, and a create
    into its range afterwards (this store still thinks it exists) makes it again."""
    root = store.root
    ids = [*range(9_990, 10_010), 123_456_789]
    for ledger_id in ids:
        await store.create_ledger(LedgerMetadata(ledger_id, 2, 2, 1, ((0, ("b-1", "b-2")),)))
    assert raw.exists(f"{root}/ledgers/000/0000/0001/2345/L6789") is not None
    assert raw.exists(f"{root}/bookieledgers/b-2/000/0000/0000/0001/L0009") is not None
    assert raw.get_children(f"{root}/ledgers") == ["000"]
    stats = dict(tree_stats(raw, root))
    assert max(stats.values()) <= 10_000
    assert await store.list_ledgers(start=9_995, limit=10) == list(range(9_995, 10_005))
    assert await store.ledgers_of_bookie("b-1", start=10_000) == [*range(10_000, 10_010), 123_456_789]
    for ledger_id in range(10_000, 10_010):
        await store.delete_ledger(ledger_id)
    assert await store.ledgers_of_bookie("b-2", start=9_999) == [9_999, 123_456_789]
    assert await store.list_ledgers(start=9_999) == [9_999, 123_456_789]
    bucket = f"{root}/ledgers/000/0000/0000/0001"
    with trio.fail_after(10):
        while raw.exists(bucket) is not None:  # the listing's delete is not waited for
            await trio.sleep(0.05)
    assert bucket not in store._buckets
    store._buckets.add(bucket)  # as another client that made it before the prune would think
    await store.create_ledger(LedgerMetadata(10_001, 1, 1, 1, ((0, ("b-3",)),)))
    assert await store.list_ledgers(start=9_999) == [9_999, 10_001, 123_456_789]
    assert await store.ledgers_of_bookie("b-3") == [10_001]


def count_requests(store: ZkMetadataStore) -> list[str]:
    """The name of every request the store's kazoo client sends from now on."""
    requests: list[str] = []
    send = store.zk._call

    def counted(request: Any, async_object: Any) -> Any:
        requests.append(type(request).__name__)
        return send(request, async_object)

    store.zk._call = counted  # type: ignore[method-assign]
    return requests


async def test_ids_come_in_blocks_in_one_request(store: ZkMetadataStore, uri: str) -> None:
    """A block of ids is one compare-and-set of the counter while no other client took ids
    since; after one did, a read and a compare-and-set."""
    first = await store.new_ledger_ids(100)
    requests = count_requests(store)
    assert await store.new_ledger_ids(1_000) == range(first.stop, first.stop + 1_000)
    assert requests == ["SetData"]
    other = ZkMetadataStore(uri)
    try:
        taken = await other.new_ledger_ids(5)
    finally:
        await other.aclose()
    requests.clear()
    assert await store.new_ledger_ids(10) == range(taken.stop, taken.stop + 10)
    assert await store.new_ledger_id() == taken.stop + 10
    assert requests == ["SetData", "GetData", "SetData", "SetData"]


async def test_list_bookies_costs_a_bounded_number_of_requests(
    store: ZkMetadataStore, uri: str, raw: KazooClient, nursery: trio.Nursery
) -> None:
    """With 300 bookies registered, a listing while nothing changed is one request (two
    with writable_only), not 1 + 300 sequential reads; a registration gone, one made and a
    read-only flip by another client all show at the next listing."""
    bookies = f"{store.root}/bookies"
    infos = [BookieInfo(f"bk-{i:03d}", f"10.0.{i // 250}.{i % 250}:3181") for i in range(300)]
    await store.list_bookies()  # makes the store's nodes
    replies = [raw.create_async(f"{bookies}/{b.bookie_id}", b.serialize(), ephemeral=True) for b in infos]
    for reply in replies:
        reply.get(timeout=10)
    requests = count_requests(store)
    assert await store.list_bookies() == infos  # read: the children and their data, pipelined
    assert len(requests) == 2 + 300
    for writable_only in (False, True, False):
        requests.clear()
        assert len(await store.list_bookies(writable_only=writable_only)) == 300
        assert requests == (["Exists", "GetChildren"] if writable_only else ["Exists"])
    raw.delete(f"{bookies}/bk-007")
    assert "bk-007" not in [b.bookie_id for b in await store.list_bookies()]
    other = ZkMetadataStore(uri)
    try:
        registration = await other.register_bookie(BookieInfo("bk-new", "10.1.0.1:3181"), ttl_s=6, nursery=nursery)
        assert (await store.list_bookies())[-1].bookie_id == "bk-new"
        await registration.set_read_only(True)
        assert "bk-new" not in [b.bookie_id for b in await store.list_bookies(writable_only=True)]
        assert (await store.list_bookies())[-1].read_only
        await registration.aclose()
        assert [b.bookie_id for b in await store.list_bookies()] == [b.bookie_id for b in infos if b.bookie_id != "bk-007"]
    finally:
        await other.aclose()


def bk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkframe", *args], capture_output=True, text=True, timeout=120)


async def test_a_store_of_the_flat_layout_is_refused_at_start(uri: str, raw: KazooClient, tmp_path: Path) -> None:
    """A store a bkframe of layout 1 made (its ledgers flat under ``ledgers``): a bookie
    refuses it at start with one line naming both versions, and makes no data dir; this
    store's listing leaves the old nodes alone. A new cluster's record says layout 2."""
    root = "/" + uri.rsplit("/", 1)[1]
    raw.create(f"{root}/cluster", ClusterRecord(1, "a" * 32, 0.0, b"s" * 32).serialize(), makepath=True)
    raw.create(f"{root}/ledgers/L0000000000000000001", b"{}", makepath=True)
    command = [sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(tmp_path / "b"), "--port", "0", "--metadata", uri]
    proc = await trio.to_thread.run_sync(lambda: subprocess.run(command, capture_output=True, text=True, timeout=120))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "has metadata layout version 1; this bkframe knows layout version 2 only" in proc.stderr
    assert not (tmp_path / "b").exists()
    old = ZkMetadataStore(uri)
    fresh = ZkMetadataStore(f"{uri}-new")
    try:
        assert await old.list_ledgers() == []
        record, made = await init_cluster(fresh)
        assert made and record.layout_version == 2 and await fresh.read_cluster() == record
    finally:
        await old.aclose()
        await fresh.aclose()
