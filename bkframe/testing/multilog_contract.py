"""The multi-log part of the metadata-store contract: :meth:`MultiLogStore.update_logs`, several
log records compared-and-set in one atomic step (what ``Logs.commit_many`` builds on).

:class:`~bkframe.testing.metadata_contract.MetadataStoreContract` inherits
:class:`MultiLogContract` and :class:`~bkframe.testing.metadata_contract.SharedMetadataStoreContract`
inherits :class:`SharedMultiLogContract`, so a store plugin runs these cases with the rest;
the fixtures (``store``, ``open_store``, ``store_uri``) are theirs. ``update_logs`` is optional
for a store (:class:`~bkframe.core.interfaces.metadata_store.MultiLogStore`): a plugin without it overrides
:attr:`MultiLogContract.multi_log` with False, and these cases are skipped.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import trio

from bkframe.core.interfaces.metadata_store import MetadataStore, MultiLogStore
from bkframe.core.metadata import Versioned
from bkframe.errors import BadVersionError, NoSuchLogError
from bkframe.testing.kit import release_together


def _multi(store: MetadataStore) -> MultiLogStore:
    assert isinstance(store, MultiLogStore), f"{type(store).__name__} has no update_logs (see MultiLogContract)"
    return store


async def _records(store: MetadataStore, *names: str) -> list[Versioned]:
    return [await store.read_log(name) for name in names]


class MultiLogContract:
    """What a store with ``update_logs`` does; see the module docstring."""

    #: Whether the store implements :class:`~bkframe.core.interfaces.metadata_store.MultiLogStore` (every
    #: built-in one does); False skips these cases.
    multi_log = True

    @pytest.fixture(autouse=True)
    def _needs_multi_log(self, request: pytest.FixtureRequest) -> None:
        if not self.multi_log and request.node.name.startswith("test_update_logs"):
            pytest.skip("the store has no update_logs (MultiLogContract.multi_log = False)")

    async def test_update_logs_writes_all_or_nothing(self, store: MetadataStore) -> None:
        """Every record changes, or none does: a stale version or a missing log in the batch
        leaves every log of it as it was (the changes before it in the batch included), and
        the error names that log. Cursors stay with their logs; the versions returned are
        the ones the next compare-and-set needs."""
        multi = _multi(store)
        va, vb, vc = [await store.create_log(name, b"0") for name in ("a", "b", "c")]
        await store.write_cursor("a", "reader", b"0:0", None)
        va, vb = await multi.update_logs([("a", b"1", va), ("b", b"1", vb)])
        assert [(r.value, r.version) for r in await _records(store, "a", "b", "c")] == [(b"1", va), (b"1", vb), (b"0", vc)]
        before = await _records(store, "a", "b", "c")
        with pytest.raises(BadVersionError, match="'b'"):
            await multi.update_logs([("a", b"2", va), ("c", b"2", vc), ("b", b"2", vb - 1)])
        with pytest.raises(NoSuchLogError, match="'nope'"):
            await multi.update_logs([("a", b"2", va), ("nope", b"2", 1), ("b", b"2", vb)])
        assert await _records(store, "a", "b", "c") == before
        assert await multi.update_logs([]) == []
        with pytest.raises(ValueError, match=r"\['a'\] given more than once"):
            await multi.update_logs([("a", b"2", va), ("a", b"3", va)])
        # The versions returned are current: a single CAS and another batch go on from them.
        va = await store.update_log("a", b"2", va)
        assert await multi.update_logs([("c", b"3", vc), ("a", b"3", va)]) == [
            (await store.read_log("c")).version, (await store.read_log("a")).version,
        ]
        cursor = await store.read_cursor("a", "reader")
        assert cursor is not None and cursor.value == b"0:0"
        assert [r.value for r in await _records(store, "a", "b", "c")] == [b"3", b"1", b"3"]

    async def test_update_logs_racing_on_a_shared_log_exactly_one_wins(
        self, store: MetadataStore, open_store: Callable[[], MetadataStore]
    ) -> None:
        """Four clients each change their own log and a shared one, all from the versions
        read before: exactly one batch lands, whole; the losers' own logs stay as they were."""
        contenders = 4
        for name in ("hub", *(f"own-{i}" for i in range(contenders))):
            await store.create_log(name, b"start")
        hub = await store.read_log("hub")
        own = await _records(store, *(f"own-{i}" for i in range(contenders)))
        won: list[int] = []
        others = [open_store() for _ in range(contenders)]
        try:

            async def update(i: int) -> None:
                # The shared log last: a store that applied the batch in order must undo own-i.
                change = [(f"own-{i}", b"by-%d" % i, own[i].version), ("hub", b"by-%d" % i, hub.version)]
                try:
                    await _multi(others[i]).update_logs(change)
                    won.append(i)
                except BadVersionError:
                    pass

            async with trio.open_nursery() as nursery:
                for i in range(contenders):
                    nursery.start_soon(update, i)
        finally:
            for other in others:
                await other.aclose()
        assert len(won) == 1, won
        winner = won[0]
        assert (await store.read_log("hub")).value == b"by-%d" % winner
        for i in range(contenders):
            assert (await store.read_log(f"own-{i}")).value == (b"by-%d" % i if i == winner else b"start")


class SharedMultiLogContract(MultiLogContract):
    """What a store several processes share does besides."""

    async def test_update_logs_from_two_processes(self, store: MetadataStore, store_uri: str) -> None:
        """Two processes append their marks to two log records at once by read-modify-
        ``update_logs``, retrying when they lose: no mark is lost, and both records hold the
        same marks in the same order (no batch landed in one log without the other)."""
        await store.create_log("left", b"")
        await store.create_log("right", b"")
        rounds = 15
        script = textwrap.dedent(
            f"""
            import sys
            import trio
            from bkframe.errors import BadVersionError
            from bkframe.core.plugin_manager import PluginManager
            async def main(me):
                s = PluginManager().metadata_store({store_uri!r})
                await s.list_logs()  # connected: now wait for the start signal
                print("ready", flush=True)
                sys.stdin.readline()
                for i in range({rounds}):
                    while True:
                        left, right = await s.read_log("left"), await s.read_log("right")
                        value = left.value + b"%s-%d," % (me.encode(), i)
                        try:
                            await s.update_logs([("left", value, left.version), ("right", value, right.version)])
                            break
                        except BadVersionError:
                            pass
                await s.aclose()
            trio.run(main, sys.argv[1])
            """
        )
        procs = [
            subprocess.Popen([sys.executable, "-c", script, me], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for me in ("p", "q")
        ]

        assert await trio.to_thread.run_sync(release_together, procs) == [0, 0]
        left, right = await _records(store, "left", "right")
        marks = left.value.decode().rstrip(",").split(",")
        assert left.value == right.value
        assert sorted(marks) == sorted([f"p-{i}" for i in range(rounds)] + [f"q-{i}" for i in range(rounds)])
