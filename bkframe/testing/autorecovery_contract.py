"""The autorecovery part of the metadata-store contract: locks, under-replicated marks and
decommissioned bookies (what the auditor and the replication workers build on).

:class:`~bkframe.testing.metadata_contract.MetadataStoreContract` inherits
:class:`AutorecoveryContract` and :class:`~bkframe.testing.metadata_contract.SharedMetadataStoreContract`
inherits :class:`SharedAutorecoveryContract`, so a store plugin runs these cases with the rest;
the fixtures (``store``, ``open_store``, ``store_uri``, ``nursery``) are theirs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import trio

from bkframe.core.interfaces.metadata_store import Lock, MetadataStore, iter_under_replicated
from bkframe.core.metadata import BookieInfo, UnderReplicated


async def _marks(store: MetadataStore) -> dict[int, set[str]]:
    return {m.ledger_id: set(m.bookies) for m in await store.list_under_replicated()}


class AutorecoveryContract:
    """What every store does for autorecovery; see the module docstring."""

    # -- locks -----------------------------------------------------------------------------

    async def test_try_lock_is_exclusive(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        others = [open_store() for _ in range(4)]
        try:
            won: list[tuple[str, Lock]] = []

            async def take(s: MetadataStore, holder: str) -> None:
                lock = await s.try_lock("ledger/17", holder, 5, nursery)
                if lock is not None:
                    won.append((holder, lock))

            # Five clients race for one lock: exactly one gets it.
            async with trio.open_nursery() as race:
                for i, s in enumerate([store, *others]):
                    race.start_soon(take, s, f"worker-{i}")
            assert len(won) == 1
            holder, lock = won[0]
            assert isinstance(lock, Lock) and lock.name == "ledger/17" and not lock.lost.is_set()
            for s in [store, *others]:
                assert await s.lock_holder("ledger/17") == holder
                assert await s.try_lock("ledger/17", "late", 5, nursery) is None
                assert await s.try_lock("ledger/17", holder, 5, nursery) is None  # not re-entrant
            # Another name is another lock.
            other = await others[0].try_lock("ledger/18", "worker-x", 5, nursery)
            assert other is not None and await store.lock_holder("ledger/18") == "worker-x"
            await lock.release()
            await other.release()
        finally:
            for s in others:
                await s.aclose()

    async def test_released_lock_can_be_taken_and_holder_is_reported(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        other = open_store()
        try:
            assert await store.lock_holder("auditor") is None
            first = await store.try_lock("auditor", "bookie-1", 5, nursery)
            assert first is not None
            assert await other.lock_holder("auditor") == "bookie-1"
            assert await other.try_lock("auditor", "bookie-2", 5, nursery) is None
            await first.release()
            assert await other.lock_holder("auditor") is None
            second = await other.try_lock("auditor", "bookie-2", 5, nursery)
            assert second is not None and await store.lock_holder("auditor") == "bookie-2"
            # A stale holder releasing again must not free the new holder's lock.
            await first.release()
            assert await store.lock_holder("auditor") == "bookie-2"
            assert not second.lost.is_set()
            await second.release()
            assert await store.lock_holder("auditor") is None
        finally:
            await other.aclose()

    async def test_a_live_lock_outlives_its_ttl(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        """What keeps a lock alive (heartbeat, keep-alive, session) works: held for several
        TTLs, nobody else can take it and it is not lost."""
        other = open_store()
        try:
            lock = await store.try_lock("auditor", "bookie-1", 2.0, nursery)
            assert lock is not None
            await trio.sleep(5.0)
            assert await other.lock_holder("auditor") == "bookie-1"
            assert await other.try_lock("auditor", "bookie-2", 2.0, nursery) is None
            assert not lock.lost.is_set()
            await lock.release()
        finally:
            await other.aclose()

    # -- under-replicated marks ------------------------------------------------------------

    async def test_marks_merge_bookies_and_keep_since(self, store: MetadataStore) -> None:
        assert await store.list_under_replicated() == []
        before = time.time()
        await store.mark_under_replicated(9, ["b1"])
        after = time.time()
        [first] = await store.list_under_replicated()
        assert (first.ledger_id, first.bookies) == (9, frozenset({"b1"}))
        assert isinstance(first, UnderReplicated) and before - 1 <= first.since <= after + 1
        await trio.sleep(0.2)
        await store.mark_under_replicated(9, ["b2", "b1"])
        await store.mark_under_replicated(3, ["b3"])
        marks = await store.list_under_replicated()
        assert [(m.ledger_id, m.bookies) for m in marks] == [(3, frozenset({"b3"})), (9, frozenset({"b1", "b2"}))]
        assert marks[1].since == first.since  # marking again keeps the first mark's time
        assert marks[0].since >= first.since

    async def test_clear_removes_only_the_given_bookies(self, store: MetadataStore) -> None:
        await store.mark_under_replicated(4, ["b1", "b2", "b3"])
        await store.mark_under_replicated(5, ["b1"])
        since = (await store.list_under_replicated())[0].since
        await store.clear_under_replicated(4, ["b1", "b9"])  # b9 was never in it: not an error
        assert await _marks(store) == {4: {"b2", "b3"}, 5: {"b1"}}
        assert (await store.list_under_replicated())[0].since == since
        await store.clear_under_replicated(4, ["b2", "b3"])
        assert await _marks(store) == {5: {"b1"}}  # an empty mark is deleted
        await store.clear_under_replicated(4, ["b2"])  # no mark: not an error
        await store.clear_under_replicated(5, [])
        assert await _marks(store) == {5: {"b1"}}
        # Marked again after it went: a new mark, with a new since.
        await trio.sleep(0.05)
        await store.mark_under_replicated(4, ["b7"])
        assert await _marks(store) == {4: {"b7"}, 5: {"b1"}}

    async def test_concurrent_marks_and_clears_lose_nothing(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore]
    ) -> None:
        """The auditor marks while workers clear, through different clients: each round
        marks one new bookie and clears the previous one at the same time, so a clear that
        deletes the emptied mark without checking that nobody added to it loses the mark."""
        markers, clearers = [open_store() for _ in range(2)], [open_store() for _ in range(2)]
        try:
            await store.mark_under_replicated(1, ["r0"])
            rounds = 12
            for i in range(1, rounds + 1):
                async with trio.open_nursery() as together:
                    together.start_soon(markers[i % 2].mark_under_replicated, 1, [f"r{i}"])
                    together.start_soon(clearers[i % 2].clear_under_replicated, 1, [f"r{i - 1}"])
                assert await _marks(store) == {1: {f"r{i}"}}, f"round {i}"
            # Many at once on one ledger: 8 bookies added, 8 others cleared.
            await store.mark_under_replicated(2, [f"old{i}" for i in range(8)])
            async with trio.open_nursery() as together:
                for i in range(8):
                    together.start_soon(markers[i % 2].mark_under_replicated, 2, [f"new{i}"])
                    together.start_soon(clearers[i % 2].clear_under_replicated, 2, [f"old{i}"])
            assert await _marks(store) == {1: {f"r{rounds}"}, 2: {f"new{i}" for i in range(8)}}
        finally:
            for s in markers + clearers:
                await s.aclose()

    async def test_marking_many_at_once_equals_marking_one_by_one(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore]
    ) -> None:
        """A page of marks (the auditor's, for a lost bookie) leaves what a mark per ledger
        would: new marks with ``since`` = now, bookies added to existing ones whose ``since``
        stays. The ids cross the stores' batches (etcd: 128 operations per transaction) and
        ZooKeeper's buckets (10^4 ids each), up to the largest id."""
        ids = [*range(1, 301, 2), *range(9_990, 10_010), 123_456_789_012, 2**63 - 1]
        await store.mark_under_replicated(5, ["b0"])
        await store.mark_under_replicated(9_999, ["b1", "b9"])
        old = {m.ledger_id: m.since for m in await store.list_under_replicated()}
        await trio.sleep(0.2)
        before = time.time()
        # Repeated ids count as one; 5 and 9_999 were marked already, and change.
        assert await store.mark_many_under_replicated(ids + ids[:10], ["b1", "b2"]) == len(ids)
        after = time.time()
        assert await store.mark_many_under_replicated([], ["b3"]) == 0  # nothing to mark: not an error
        assert await store.mark_many_under_replicated(ids[-5:], ["b2"]) == 0  # marked so already: nothing written
        marks = await store.list_under_replicated()
        assert [m.ledger_id for m in marks] == sorted(ids)
        expected = {i: {"b1", "b2"} for i in ids} | {5: {"b0", "b1", "b2"}, 9_999: {"b1", "b2", "b9"}}
        assert await _marks(store) == expected
        for m in marks:
            if m.ledger_id in old:
                assert m.since == old[m.ledger_id]  # marking again keeps the first mark's time
            else:
                assert before - 1 <= m.since <= after + 1
        # The same through one call per ledger, on a second set of ids, reads the same.
        one_by_one = [i + 10**6 for i in ids[:-1]]
        for i in one_by_one:
            await store.mark_under_replicated(i, ["b1", "b2"])
        by_one = {m.ledger_id: m for m in await store.list_under_replicated() if m.ledger_id in set(one_by_one)}
        assert {i: m.bookies for i, m in by_one.items()} == {i: frozenset({"b1", "b2"}) for i in one_by_one}
        # Marks cleared (and, on ZooKeeper, their emptied buckets pruned by listings) are made
        # again by a client that saw them before.
        other = open_store()
        try:
            for m in await other.list_under_replicated():
                await other.clear_under_replicated(m.ledger_id, m.bookies)
            for _ in range(6):  # a listing prunes one level of emptied buckets
                assert await other.list_under_replicated() == []
                await trio.sleep(0.05)
            await store.mark_many_under_replicated(ids, ["b4"])
            assert await _marks(other) == {i: {"b4"} for i in ids}
        finally:
            await other.aclose()

    async def test_marks_are_listed_in_pages_and_counted(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore]
    ) -> None:
        """A page of marks starts at ``start`` and holds at most ``limit`` marks, ascending,
        with their bookies; paging with :func:`iter_under_replicated` sees each mark once,
        across ZooKeeper's buckets (10^4 ids) too; the count follows marks and clears, from
        another client as well."""
        ids = [1, 2, 5, 9_999, 10_000, 10_001, 123_456_789, 2**62 + 3]
        assert await store.count_under_replicated() == 0
        assert await store.list_under_replicated(limit=10) == []
        await store.mark_many_under_replicated(list(reversed(ids)), ["b1"])
        await store.mark_many_under_replicated([2, 7], ["b2"])
        ids = sorted([*ids, 7])
        assert [m.ledger_id for m in await store.list_under_replicated()] == ids
        assert [m.ledger_id for m in await store.list_under_replicated(limit=3)] == [1, 2, 5]
        page = await store.list_under_replicated(start=2, limit=3)
        assert [(m.ledger_id, set(m.bookies)) for m in page] == [(2, {"b1", "b2"}), (5, {"b1"}), (7, {"b2"})]
        later = await store.list_under_replicated(start=10_000, limit=100)
        assert [m.ledger_id for m in later] == [10_000, 10_001, 123_456_789, 2**62 + 3]
        assert await store.list_under_replicated(start=2**62 + 4) == []
        assert await store.list_under_replicated(start=2**63) == []  # a cursor past the largest id
        assert await store.list_under_replicated(start=6, limit=0) == []
        for size in (1, 2, 4, 100):
            pages = [[m.ledger_id for m in chunk] async for chunk in iter_under_replicated(store, page=size)]
            assert [i for chunk in pages for i in chunk] == ids
            assert all(0 < len(chunk) <= size for chunk in pages)
        other = open_store()
        try:
            assert await other.count_under_replicated() == len(ids)
            await other.clear_under_replicated(10_000, ["b1"])
            await other.clear_under_replicated(5, ["b1"])
            await other.clear_under_replicated(2, ["b1"])  # b2 is left: still marked
            assert [m.ledger_id for m in await store.list_under_replicated(start=3, limit=2)] == [7, 9_999]
            assert [m.ledger_id for m in await store.list_under_replicated(start=9_999, limit=2)] == [9_999, 10_001]
            assert await store.count_under_replicated() == len(ids) - 2
            for m in await other.list_under_replicated():
                await other.clear_under_replicated(m.ledger_id, m.bookies)
            assert await store.count_under_replicated() == 0
        finally:
            await other.aclose()

    async def test_marking_many_is_atomic_per_ledger_against_clears(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore]
    ) -> None:
        """While a page of ledgers is marked with a new bookie, workers clear the previous one
        from each ledger through other clients (the mark then empty, deleted): no ledger
        loses the new bookie, none keeps the old one."""
        marker, clearers = open_store(), [open_store() for _ in range(2)]
        ids = list(range(100, 260))
        try:
            await store.mark_many_under_replicated(ids, ["r0"])
            for i in range(1, 4):

                async def clear(s: MetadataStore, mine: list[int], gone: str) -> None:
                    for ledger_id in mine:
                        await s.clear_under_replicated(ledger_id, [gone])

                async with trio.open_nursery() as together:
                    together.start_soon(marker.mark_many_under_replicated, ids, [f"r{i}"])
                    for k, s in enumerate(clearers):
                        together.start_soon(clear, s, ids[k :: len(clearers)], f"r{i - 1}")
                assert await _marks(store) == {ledger_id: {f"r{i}"} for ledger_id in ids}, f"round {i}"
        finally:
            for s in [marker, *clearers]:
                await s.aclose()

    # -- decommissioned bookies ------------------------------------------------------------

    async def test_decommissioned_bookies_persist_and_take_no_writes(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore], nursery: trio.Nursery
    ) -> None:
        assert await store.list_decommissioned() == set()
        registrations = [
            await store.register_bookie(BookieInfo(b, f"127.0.0.1:{i + 1}"), ttl_s=5, nursery=nursery)
            for i, b in enumerate(("a", "b", "c"))
        ]
        writer = open_store()
        await writer.set_decommissioned("b", True)
        await writer.set_decommissioned("b", True)  # again: no error, no change
        await writer.set_decommissioned("gone", True)  # not registered: still recorded
        await writer.aclose()  # the flag outlives the client that set it
        reopened = open_store()
        try:
            assert await store.list_decommissioned() == {"b", "gone"}
            assert await reopened.list_decommissioned() == {"b", "gone"}
            assert [b.bookie_id for b in await reopened.list_bookies(writable_only=True)] == ["a", "c"]
            assert [b.bookie_id for b in await reopened.list_bookies()] == ["a", "b", "c"]
            await reopened.set_decommissioned("b", False)
            await reopened.set_decommissioned("never", False)  # not marked: no error
            assert await reopened.list_decommissioned() == {"gone"}
            assert [b.bookie_id for b in await reopened.list_bookies(writable_only=True)] == ["a", "b", "c"]
            for r in registrations:
                await r.aclose()
        finally:
            await reopened.aclose()


class SharedAutorecoveryContract(AutorecoveryContract):
    """Stores several processes share: a lock whose holder process dies becomes free."""

    async def test_lock_is_freed_when_its_holder_dies(
        self, store: MetadataStore, store_uri: str, nursery: trio.Nursery
    ) -> None:
        script = textwrap.dedent(
            f"""
            import trio
            from bkframe.core.plugin_manager import PluginManager
            async def main():
                s = PluginManager().metadata_store({store_uri!r}, create=True)
                async with trio.open_nursery() as nursery:
                    lock = await s.try_lock("auditor", "doomed", 2.0, nursery)
                    print("locked" if lock is not None else "refused", flush=True)
                    await trio.sleep_forever()
            trio.run(main)
            """
        )
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
            await trio.sleep(3.0)  # more than one TTL: kept alive while its holder lives
            assert await store.lock_holder("auditor") == "doomed"
            assert await store.try_lock("auditor", "heir", 2.0, nursery) is None
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # sqlite/etcd: the TTL; ZooKeeper: the session timeout.
        with trio.fail_after(20):
            while (lock := await store.try_lock("auditor", "heir", 2.0, nursery)) is None:
                await trio.sleep(0.1)
        assert await store.lock_holder("auditor") == "heir"
        await lock.release()
