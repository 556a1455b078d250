"""The contract every metadata store keeps, as a test suite a store plugin runs on its backend.

Subclass in a test module of your plugin and provide the ``store_uri`` fixture (a fresh,
empty store per test)::

    from bkframe.testing.metadata_contract import SharedMetadataStoreContract

    class TestMyStore(SharedMetadataStoreContract):
        @pytest.fixture
        def store_uri(self, my_server):
            return f"my://{my_server.address}/t-{uuid.uuid4().hex}"

:class:`MetadataStoreContract` holds what every store must do; stores that several
processes share (all but ``memory://``) take :class:`SharedMetadataStoreContract`, which
adds id uniqueness across processes and registrations that expire when their holder dies.
The autorecovery cases (locks, under-replicated marks, decommissioned bookies) come in
from :mod:`bkframe.testing.autorecovery_contract`, the atomic update of several logs from
:mod:`bkframe.testing.multilog_contract`.
Stores are opened through the plugin manager (override ``plugins`` to register a plugin
that is not installed), with ``create=True`` as a bookie opens them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable

import attrs
import pytest
import trio

from bkframe.common.cluster_record import init_cluster, require_cluster
from bkframe.core.interfaces.metadata_store import MetadataStore, iter_ledger_ids, iter_ledgers_of_bookie
from bkframe.core.metadata import LAYOUT_VERSION, BookieInfo, ClusterRecord, LedgerMetadata, LedgerStateName
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import (
    BadVersionError,
    BookieIdInUseError,
    LedgerExistsError,
    LogExistsError,
    NoClusterError,
    NoSuchLedgerError,
    NoSuchLogError,
)
from bkframe.testing.autorecovery_contract import AutorecoveryContract, SharedAutorecoveryContract
from bkframe.testing.kit import release_together
from bkframe.testing.multilog_contract import MultiLogContract, SharedMultiLogContract
from bkframe.testing.plugin_contract import PluginContract


def ledger(ledger_id: int, **kw: object) -> LedgerMetadata:
    return LedgerMetadata(ledger_id, 3, 2, 2, ((0, ("a", "b", "c")),), **kw)  # type: ignore[arg-type]


class MetadataStoreContract(AutorecoveryContract, MultiLogContract, PluginContract):
    """What every :class:`~bkframe.core.interfaces.metadata_store.MetadataStore` does; see the module docstring."""

    @pytest.fixture
    def store_uri(self) -> str:
        raise NotImplementedError("a subclass provides the store_uri fixture: a fresh store per test")

    @pytest.fixture
    def open_store(self, plugins: PluginManager, store_uri: str) -> Callable[[], MetadataStore]:
        """Opens another client of the same store (call ``aclose`` on it)."""
        return lambda: plugins.metadata_store(store_uri, create=True)

    @pytest.fixture
    async def store(self, open_store: Callable[[], MetadataStore]) -> AsyncIterator[MetadataStore]:
        s = open_store()
        assert isinstance(s, MetadataStore)
        yield s
        await s.aclose()

    async def test_a_cluster_is_made_once(self, store: MetadataStore, open_store: Callable[[], MetadataStore]) -> None:
        """A fresh store holds no cluster; of several clients making one at once exactly one
        stores its record, and every client then reads that record, secret included."""
        assert await store.read_cluster() is None
        made = [ClusterRecord.new() for _ in range(4)]
        stored: list[bool] = [False] * len(made)

        async def init(i: int) -> None:
            other = open_store()
            try:
                stored[i] = await other.init_cluster(made[i])
            finally:
                await other.aclose()

        async with trio.open_nursery() as nursery:
            for i in range(len(made)):
                nursery.start_soon(init, i)
        assert stored.count(True) == 1
        winner = made[stored.index(True)]
        assert await store.read_cluster() == winner and len(winner.secret) == 32
        assert not await store.init_cluster(ClusterRecord.new())
        other = open_store()
        try:
            assert await other.read_cluster() == winner
        finally:
            await other.aclose()

    async def test_a_cluster_of_another_layout_is_refused(self, store: MetadataStore) -> None:
        """A store made by a bkframe of another metadata layout (1: ledgers unindexed, and
        ZooKeeper's flat under one node) is refused at start, with the versions named."""
        await store.init_cluster(ClusterRecord(1, "0" * 32, 0.0, b"s" * 32))
        with pytest.raises(
            NoClusterError, match=rf"has metadata layout version 1; this bkframe knows layout version {LAYOUT_VERSION} only"
        ):
            await require_cluster(store)
        with pytest.raises(NoClusterError, match="layout version 1"):
            await init_cluster(store)

    async def test_ids_are_unique_under_concurrency(self, store: MetadataStore, open_store: Callable[[], MetadataStore]) -> None:
        ids: list[int] = []

        async def take(n: int) -> None:
            other = open_store()
            for _ in range(n):
                ids.append(await other.new_ledger_id())
            await other.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(take, 25)
        assert len(ids) == 200 and len(set(ids)) == 200 and min(ids) >= 1

    async def test_create_read_update_delete_list(self, store: MetadataStore) -> None:
        created = await store.create_ledger(ledger(7, custom={"app": "x"}))
        assert created.version >= 0
        with pytest.raises(LedgerExistsError):
            await store.create_ledger(ledger(7))
        read = await store.read_ledger(7)
        assert read == created and read.custom == {"app": "x"}
        # The very same record again -- a create whose answer was lost, sent again -- is that
        # create, not another's: the caller keeps its id (no orphan ledger).
        again = await store.create_ledger(attrs.evolve(created, version=-1))
        assert again == created and await store.read_ledger(7) == created
        with pytest.raises(NoSuchLedgerError):
            await store.read_ledger(8)
        closed = await store.update_ledger(attrs.evolve(read, state=LedgerStateName.CLOSED, last_entry_id=4), read.version)
        assert closed.version != read.version and (await store.read_ledger(7)).last_entry_id == 4
        with pytest.raises(BadVersionError):
            await store.update_ledger(attrs.evolve(read, last_entry_id=9), read.version)
        await store.create_ledger(ledger(3))
        assert await store.list_ledgers() == [3, 7]
        await store.delete_ledger(7)
        with pytest.raises(NoSuchLedgerError):
            await store.delete_ledger(7)
        with pytest.raises(NoSuchLedgerError):
            await store.update_ledger(closed, closed.version)
        assert await store.list_ledgers() == [3]

    async def test_ledgers_are_listed_in_pages(self, store: MetadataStore) -> None:
        """A page starts at ``start``, holds at most ``limit`` ids, ascending; paging with
        :func:`iter_ledger_ids` sees each ledger once, across the bounds of ZooKeeper's
        buckets (10^4 ids) too."""
        ids = [1, 2, 5, 9_999, 10_000, 10_001, 123_456_789, 2**62 + 3]
        for ledger_id in reversed(ids):
            await store.create_ledger(ledger(ledger_id))
        assert await store.list_ledgers() == ids
        assert await store.list_ledgers(limit=3) == [1, 2, 5]
        assert await store.list_ledgers(start=3, limit=2) == [5, 9_999]
        assert await store.list_ledgers(start=10_000, limit=100) == [10_000, 10_001, 123_456_789, 2**62 + 3]
        assert await store.list_ledgers(start=2**62 + 4) == []
        assert await store.list_ledgers(start=6, limit=0) == []
        for page in (1, 2, 3, 100):
            pages = [chunk async for chunk in iter_ledger_ids(store, page=page)]
            assert [i for chunk in pages for i in chunk] == ids
            assert all(0 < len(chunk) <= page for chunk in pages)
        await store.delete_ledger(10_000)
        assert await store.list_ledgers(start=9_999, limit=2) == [9_999, 10_001]

    async def test_logs_are_listed_in_pages(self, store: MetadataStore) -> None:
        """A page of log names starts at ``start`` (inclusive), holds at most ``limit``,
        sorted; ``count_logs`` counts them; a log's cursors are no log names."""
        names = ["a", "a.b", "a-b", "b", "b_1", "zz"]
        for name in reversed(names):
            await store.create_log(name, b"r")
        await store.write_cursor("a", "c1", b"x", None)
        assert await store.list_logs() == sorted(names)
        assert await store.count_logs() == len(names)
        assert await store.list_logs(limit=2) == ["a", "a-b"]
        assert await store.list_logs(start="a.", limit=3) == ["a.b", "b", "b_1"]
        assert await store.list_logs(start="b") == ["b", "b_1", "zz"]
        assert await store.list_logs(start="zz") == ["zz"] and await store.list_logs(start="zz0") == []
        assert await store.list_logs(start="a", limit=0) == []
        await store.delete_log("b")
        assert await store.list_logs(start="a.", limit=2) == ["a.b", "b_1"] and await store.count_logs() == len(names) - 1

    async def test_ledgers_are_indexed_by_bookie(self, store: MetadataStore) -> None:
        """``ledgers_of_bookie`` follows every create, ensemble change and delete, at once."""
        await store.create_ledger(ledger(4))  # a, b, c
        two = await store.create_ledger(LedgerMetadata(20_004, 2, 2, 1, ((0, ("b", "d")),)))
        assert await store.ledgers_of_bookie("a") == [4]
        assert await store.ledgers_of_bookie("b") == [4, 20_004]
        assert await store.ledgers_of_bookie("b", start=5) == [20_004]
        assert await store.ledgers_of_bookie("b", limit=1) == [4]
        assert await store.ledgers_of_bookie("nobody") == []
        # An ensemble change: d is replaced by e from entry 10 on; d keeps its fragment.
        changed = await store.update_ledger(attrs.evolve(two, fragments=((0, ("b", "d")), (10, ("b", "e")))), two.version)
        assert await store.ledgers_of_bookie("e") == [20_004] and await store.ledgers_of_bookie("d") == [20_004]
        # A re-replication: d's fragment moves to f; d no longer holds anything of it.
        await store.update_ledger(attrs.evolve(changed, fragments=((0, ("b", "f")), (10, ("b", "e")))), changed.version)
        assert await store.ledgers_of_bookie("d") == []
        assert await store.ledgers_of_bookie("f") == [20_004]
        pages = [chunk async for chunk in iter_ledgers_of_bookie(store, "b", page=1)]
        assert pages == [[4], [20_004]]
        await store.delete_ledger(20_004)
        assert await store.ledgers_of_bookie("b") == [4]
        assert await store.ledgers_of_bookie("e") == [] and await store.ledgers_of_bookie("f") == []

    async def test_ids_come_in_blocks(self, store: MetadataStore, open_store: Callable[[], MetadataStore]) -> None:
        """A block is ``count`` fresh ids; blocks and single ids never overlap, however they
        are mixed and by however many clients at once."""
        taken: list[int] = []

        async def take(n: int) -> None:
            other = open_store()
            try:
                for i in range(n):
                    if i % 3 == 0:
                        taken.append(await other.new_ledger_id())
                    else:
                        block = await other.new_ledger_ids(1 + i % 7)
                        assert len(block) == 1 + i % 7 and block.step == 1
                        taken.extend(block)
            finally:
                await other.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(take, 12)
        assert len(taken) == len(set(taken)) and min(taken) >= 1
        with pytest.raises(ValueError):
            await store.new_ledger_ids(0)

    async def test_concurrent_cas_one_wins(self, store: MetadataStore, open_store: Callable[[], MetadataStore]) -> None:
        base = await store.create_ledger(ledger(1))
        outcomes: list[str] = []

        async def update(entry: int) -> None:
            other = open_store()
            try:
                await other.update_ledger(attrs.evolve(base, last_entry_id=entry), base.version)
                outcomes.append("won")
            except BadVersionError:
                outcomes.append("lost")
            finally:
                await other.aclose()

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(update, i)
        assert sorted(outcomes) == ["lost"] * 4 + ["won"]

    async def test_watch_sees_create_update_delete(self, store: MetadataStore) -> None:
        md = await store.create_ledger(ledger(5))
        seen: list[LedgerMetadata | None] = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for value in store.watch_ledger(5):
                        seen.append(value)

                nursery.start_soon(watch)
                while not seen:
                    await trio.sleep(0.01)
                await store.update_ledger(attrs.evolve(md, state=LedgerStateName.CLOSED), md.version)
                while len(seen) < 2:
                    await trio.sleep(0.01)
                await store.delete_ledger(5)
        assert seen[0] is not None and seen[0].state == LedgerStateName.OPEN
        assert seen[1] is not None and seen[1].state == LedgerStateName.CLOSED
        assert seen[-1] is None

    async def test_bookie_registration(self, store: MetadataStore, nursery: trio.Nursery) -> None:
        reg_a = await store.register_bookie(BookieInfo("a", "127.0.0.1:1"), ttl_s=5, nursery=nursery)
        reg_b = await store.register_bookie(BookieInfo("b", "127.0.0.1:2"), ttl_s=5, nursery=nursery)
        assert [b.bookie_id for b in await store.list_bookies()] == ["a", "b"]
        await reg_b.set_read_only(True)
        assert [b.bookie_id for b in await store.list_bookies(writable_only=True)] == ["a"]
        assert [b.read_only for b in await store.list_bookies()] == [False, True]
        await reg_a.aclose()
        assert [b.bookie_id for b in await store.list_bookies()] == ["b"]
        await reg_b.aclose()
        assert await store.list_bookies() == []

    async def test_two_bookies_never_hold_one_id(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        """A live registration of another instance is never replaced -- not through another
        client of the store either -- and the refused bookie's leaving deletes nothing; the
        same bookie's previous life is replaced (a restart before its registration expired)."""
        first = BookieInfo("twin", "10.0.0.1:3181", instance="aaaa")
        held = await store.register_bookie(first, ttl_s=5, nursery=nursery)
        other = open_store()
        try:
            for s in (store, other):
                with pytest.raises(BookieIdInUseError, match=r"'twin' is registered by another live bookie \(at 10.0.0.1:3181"):
                    await s.register_bookie(BookieInfo("twin", "10.0.0.2:3181", instance="bbbb"), ttl_s=5, nursery=nursery)
            assert [(b.address, b.instance) for b in await store.list_bookies()] == [("10.0.0.1:3181", "aaaa")]
            again = await other.register_bookie(attrs.evolve(first, address="10.0.0.1:4000"), ttl_s=5, nursery=nursery)
            assert [(b.address, b.instance) for b in await store.list_bookies()] == [("10.0.0.1:4000", "aaaa")]
            await again.aclose()
            assert await store.list_bookies() == []
            await held.aclose()  # its registration was replaced: closing it removes nothing of anyone's
        finally:
            await other.aclose()

    async def test_read_only_flag_goes_both_ways_and_outlives_heartbeats(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        """A bookie's disk fills and empties again: every client of the store sees the flag,
        and the registration's own heartbeats or keep-alives do not undo it."""
        registration = await store.register_bookie(BookieInfo("ro", "127.0.0.1:3"), ttl_s=1.5, nursery=nursery)
        other = open_store()
        try:
            await registration.set_read_only(True)
            await trio.sleep(2.0)  # several heartbeats later
            for s in (store, other):
                assert [(b.bookie_id, b.read_only) for b in await s.list_bookies()] == [("ro", True)]
                assert await s.list_bookies(writable_only=True) == []
            await registration.set_read_only(False)
            await trio.sleep(1.0)
            for s in (store, other):
                assert [b.bookie_id for b in await s.list_bookies(writable_only=True)] == ["ro"]
        finally:
            await registration.aclose()
            await other.aclose()

    async def test_cookies_cas(self, store: MetadataStore) -> None:
        assert await store.read_cookie("b1") is None
        v1 = await store.write_cookie("b1", b"instance-1", None)
        with pytest.raises(BadVersionError):
            await store.write_cookie("b1", b"other", None)
        cookie = await store.read_cookie("b1")
        assert cookie is not None and (cookie.value, cookie.version) == (b"instance-1", v1)
        v2 = await store.write_cookie("b1", b"instance-2", v1)
        with pytest.raises(BadVersionError):
            await store.write_cookie("b1", b"stale", v1)
        cookie = await store.read_cookie("b1")
        assert cookie is not None and (cookie.value, cookie.version) == (b"instance-2", v2)

    # -- named logs: log and cursor records ----------------------------------------------

    async def test_log_records_create_read_cas_list_delete(self, store: MetadataStore) -> None:
        v1 = await store.create_log("orders", b"record-1")
        with pytest.raises(LogExistsError):
            await store.create_log("orders", b"again")
        found = await store.read_log("orders")
        assert (found.value, found.version) == (b"record-1", v1)
        with pytest.raises(NoSuchLogError):
            await store.read_log("nope")
        v2 = await store.update_log("orders", b"record-2", v1)
        assert v2 != v1 and (await store.read_log("orders")).value == b"record-2"
        with pytest.raises(BadVersionError):
            await store.update_log("orders", b"stale", v1)
        assert (await store.read_log("orders")).value == b"record-2"
        with pytest.raises(NoSuchLogError):
            await store.update_log("nope", b"x", 1)
        await store.create_log("audit", b"a")
        await store.create_log("orders.eu", b"b")
        assert await store.list_logs() == ["audit", "orders", "orders.eu"]
        with pytest.raises(BadVersionError):
            await store.delete_log("orders", expected_version=v1)
        await store.delete_log("orders", expected_version=v2)
        await store.delete_log("audit")
        with pytest.raises(NoSuchLogError):
            await store.delete_log("audit")
        assert await store.list_logs() == ["orders.eu"]
        # A name can be used again once deleted.
        again = await store.create_log("orders", b"new")
        assert (await store.read_log("orders")).version == again

    async def test_cursors_cas_and_go_with_their_log(self, store: MetadataStore) -> None:
        with pytest.raises(NoSuchLogError):
            await store.write_cursor("events", "c", b"0:0", None)
        await store.create_log("events", b"r")
        await store.create_log("events2", b"r")
        assert await store.read_cursor("events", "c") is None
        v1 = await store.write_cursor("events", "c", b"0:0", None)
        with pytest.raises(BadVersionError):
            await store.write_cursor("events", "c", b"dup", None)
        v2 = await store.write_cursor("events", "c", b"0:5", v1)
        with pytest.raises(BadVersionError):
            await store.write_cursor("events", "c", b"stale", v1)
        cursor = await store.read_cursor("events", "c")
        assert cursor is not None and (cursor.value, cursor.version) == (b"0:5", v2)
        await store.write_cursor("events", "b", b"1:0", None)
        await store.write_cursor("events2", "other", b"9:9", None)
        assert {k: v.value for k, v in (await store.list_cursors("events")).items()} == {"b": b"1:0", "c": b"0:5"}
        assert list(await store.list_cursors("events")) == ["b", "c"]
        assert await store.delete_cursor("events", "b") is True
        assert await store.delete_cursor("events", "b") is False
        assert list(await store.list_cursors("events")) == ["c"]
        # Deleting the log deletes its cursors, and only its own.
        await store.delete_log("events")
        assert await store.list_cursors("events") == {}
        assert await store.read_cursor("events", "c") is None
        await store.create_log("events", b"r2")
        assert await store.list_cursors("events") == {}
        assert list(await store.list_cursors("events2")) == ["other"]


class SharedMetadataStoreContract(MetadataStoreContract, SharedAutorecoveryContract, SharedMultiLogContract):
    """What a store several processes share does besides: the store must be installed
    (an entry point), since the other processes open it through their own plugin manager."""

    async def test_ids_are_unique_across_processes(self, store: MetadataStore, store_uri: str) -> None:
        script = textwrap.dedent(
            f"""
            import trio
            from bkframe.core.plugin_manager import PluginManager
            async def main():
                s = PluginManager().metadata_store({store_uri!r}, create=True)
                ids = [await s.new_ledger_id() for _ in range(100)]
                print(" ".join(map(str, ids)))
                await s.aclose()
            trio.run(main)
            """
        )
        procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(4)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        ids = [int(x) for out in outs for x in out.split()]
        assert len(ids) == 400 and len(set(ids)) == 400

    async def test_registration_expires_when_the_holder_dies(self, store: MetadataStore, store_uri: str) -> None:
        script = textwrap.dedent(
            f"""
            import trio
            from bkframe.core.metadata import BookieInfo
            from bkframe.core.plugin_manager import PluginManager
            async def main():
                s = PluginManager().metadata_store({store_uri!r}, create=True)
                async with trio.open_nursery() as nursery:
                    await s.register_bookie(BookieInfo("doomed", "127.0.0.1:9"), ttl_s=1.0, nursery=nursery)
                    print("registered", flush=True)
                    await trio.sleep_forever()
            trio.run(main)
            """
        )
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "registered"
            # Alive and heartbeating: still there after more than one TTL.
            await trio.sleep(1.5)
            assert [b.bookie_id for b in await store.list_bookies()] == ["doomed"]
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # sqlite/etcd: TTL (etcd leases are at least 2 s); ZooKeeper: the session timeout.
        with trio.fail_after(20):
            while await store.list_bookies():
                await trio.sleep(0.1)

    async def test_log_and_cursor_cas_from_two_processes(self, store: MetadataStore, store_uri: str) -> None:
        """Two processes increment a counter in one log record and in one cursor record by
        read-modify-CAS, retrying when they lose: no increment is lost."""
        await store.create_log("counter", b"0")
        await store.write_cursor("counter", "c", b"0", None)
        rounds = 40
        script = textwrap.dedent(
            f"""
            import sys
            import trio
            from bkframe.errors import BadVersionError
            from bkframe.core.plugin_manager import PluginManager
            async def bump(read, write):
                while True:
                    value, version = await read()
                    try:
                        await write(str(int(value) + 1).encode(), version)
                        return
                    except BadVersionError:
                        pass
            async def main():
                s = PluginManager().metadata_store({store_uri!r})
                async def read_log():
                    r = await s.read_log("counter")
                    return r.value, r.version
                async def read_cursor():
                    r = await s.read_cursor("counter", "c")
                    return r.value, r.version
                await s.list_logs()  # connected: now wait for the start signal
                print("ready", flush=True)
                sys.stdin.readline()
                for _ in range({rounds}):
                    await bump(read_log, lambda v, ver: s.update_log("counter", v, ver))
                    await bump(read_cursor, lambda v, ver: s.write_cursor("counter", "c", v, ver))
                await s.aclose()
            trio.run(main)
            """
        )
        procs = [
            subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]

        assert await trio.to_thread.run_sync(release_together, procs) == [0, 0]
        assert (await store.read_log("counter")).value == str(2 * rounds).encode()
        cursor = await store.read_cursor("counter", "c")
        assert cursor is not None and cursor.value == str(2 * rounds).encode()
