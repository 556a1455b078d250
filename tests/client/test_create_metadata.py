"""What a create costs the metadata store: ids in blocks, the bookie listing cached -- one
store write per create in steady state, however many creates and bookies."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import trio
import trio.testing

from bkframe.client.bookies.listing import BookieSet, BookieView
from bkframe.client.client import Client
from bkframe.client.context import ClientContext
from bkframe.client.ledger_ids import LedgerIds
from bkframe.client.settings import ClientSettings
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD


class CountingStore:
    """A metadata store that counts the calls made to it (and keeps new_ledger_ids' counts)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()
        self.blocks: list[int] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "new_ledger_ids":
                self.blocks.append(args[0])
            return await attr(*args, **kwargs)

        return counted


async def test_creates_cost_one_store_write_each_and_no_listing(shared_cluster: Cluster) -> None:
    plugins = PluginManager()
    store = CountingStore(plugins.metadata_store(shared_cluster.metadata))
    settings = ClientSettings(bookie_set_max_age_s=600.0, ledger_id_block=100)
    ids: list[int] = []
    async with trio.open_nursery() as nursery:
        client = Client(ClientContext.create(nursery, store, plugins, settings))

        async def create() -> None:
            writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
            ids.append(writer.ledger_id)

        for _ in range(10):  # one at a time, then 140 at once
            await create()
        async with trio.open_nursery() as creates:
            for _ in range(140):
                creates.start_soon(create)
        nursery.cancel_scope.cancel()
    await store.aclose()
    assert len(set(ids)) == 150
    calls = store.calls
    assert calls["create_ledger"] == 150
    # Id blocks grow from 1 by doubling to ledger_id_block: 8 round trips for 150 ids.
    assert store.blocks == [1, 2, 4, 8, 16, 32, 64, 100]
    assert calls["new_ledger_id"] == 0
    # The bookies were listed once (writable, then all), not per create.
    assert calls["list_bookies"] == 2
    assert sum(calls.values()) - 150 <= 12, calls


async def test_ledger_ids_are_unique_across_clients_and_unused_ones_skipped() -> None:
    store = PluginManager().metadata_store("memory://")
    first, second = LedgerIds(store, 100), LedgerIds(store, 100)
    got: list[int] = []

    async def take(ids: LedgerIds, n: int) -> None:
        for _ in range(n):
            got.append(await ids.next())

    async with trio.open_nursery() as nursery:
        for ids in (first, second, first, second):
            nursery.start_soon(take, ids, 150)
    assert len(got) == len(set(got)) == 600
    # A client that closes with ids left: the next client's ids come after them.
    one_shot = LedgerIds(store, 100)
    await one_shot.next()
    await one_shot.next()  # its second block holds 2 ids: one is left unused
    after = await LedgerIds(store, 100).next()
    assert after > max(got) + 3
    await store.aclose()


def ids(view: BookieView) -> list[str]:
    return [b.bookie_id for b in view.writable]


async def test_the_bookie_listing_is_cached_refreshed_and_read_afresh_on_demand(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = PluginManager().metadata_store("memory://")
    async with trio.open_nursery() as nursery:
        await store.register_bookie(BookieInfo("b1", "127.0.0.1:1"), ttl_s=30, nursery=nursery)
        bookies = BookieSet(store, nursery, max_age_s=2.0)
        assert ids(await bookies.view()) == ["b1"] and bookies.reads == 1
        b2 = await store.register_bookie(BookieInfo("b2", "127.0.0.1:2"), ttl_s=30, nursery=nursery)
        await trio.sleep(0.5)
        assert ids(await bookies.view()) == ["b1"] and bookies.reads == 1  # cached
        await trio.sleep(0.7)  # past half its age: used, and read again in the background
        assert ids(await bookies.view()) == ["b1"]
        await trio.sleep(0.01)
        assert bookies.reads == 2 and ids(await bookies.view()) == ["b1", "b2"]
        await b2.set_read_only(True)
        await trio.sleep(2.5)  # past its age: read again before use
        view = await bookies.view()
        assert ids(view) == ["b1"] and bookies.reads == 3
        assert [b.bookie_id for b in view.bookies] == ["b1", "b2"] and view.addresses["b2"] == "127.0.0.1:2"
        # A failure path asks for a listing read after it asked; concurrent askers share it.
        await trio.sleep(0.01)
        async with trio.open_nursery() as askers:
            for _ in range(5):
                askers.start_soon(lambda: bookies.view(fresh=True))
        assert bookies.reads == 4
        nursery.cancel_scope.cancel()
    await store.aclose()
