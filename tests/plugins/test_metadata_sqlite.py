"""``sqlite://``: the metadata-store contract, and opening (or refusing to create) a store."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import trio

from bkframe import MetadataError
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.metadata_contract import SharedMetadataStoreContract


class TestSqliteStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path / 'meta.db'}"


def test_unopenable_sqlite_uri_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(MetadataError, match=r"sqlite://.*file/meta\.db"):
        PluginManager().metadata_store(f"sqlite://{blocker / 'meta.db'}", create=True)


async def test_a_client_never_creates_a_store(tmp_path: Path) -> None:
    """Only bookies and the sandbox make a new store; a typo in a client's URI is an error,
    not a new, empty cluster (nor a new directory)."""
    uri = f"sqlite://{tmp_path / 'typo' / 'x.db'}"
    with pytest.raises(MetadataError, match=r"metadata store 'sqlite://.*/typo/x.db' does not exist"):
        PluginManager().metadata_store(uri)
    assert not (tmp_path / "typo").exists()
    created = PluginManager().metadata_store(uri, create=True)
    await created.aclose()
    opened = PluginManager().metadata_store(uri)
    assert await opened.list_ledgers() == []
    await opened.aclose()


async def test_a_lock_taken_over_after_expiry_is_lost_by_its_holder(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A holder that stalled past its TTL (here: its row expired and another took it) learns
    it from its next heartbeat: ``lost`` is set, and its release leaves the new row alone."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    lock = await store.try_lock("auditor", "stalled", 1.0, nursery)
    assert lock is not None
    with sqlite3.connect(tmp_path / "meta.db") as db:  # as if the row had expired and "heir" took it
        db.execute("UPDATE locks SET holder = 'heir', token = 'heir-token' WHERE name = 'auditor'")
    with trio.fail_after(5):
        await lock.lost.wait()
    await lock.release()
    assert await store.lock_holder("auditor") == "heir"
    await store.aclose()


async def test_leases_are_timed_by_the_monotonic_clock_of_this_boot(tmp_path: Path, nursery: trio.Nursery) -> None:
    """Registrations and locks expire by the machine's monotonic clock: a wall-clock expiry
    an hour past (or ahead) changes nothing; a row of another boot is expired (its holder
    died with that boot); a row written by a bkframe of before (no boot) goes by its
    wall-clock expiry, and an expired one is taken over."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    await store.register_bookie(BookieInfo("b-live", "127.0.0.1:1"), 30.0, nursery)
    assert await store.try_lock("live", "holder", 30.0, nursery) is not None
    with sqlite3.connect(tmp_path / "meta.db") as db:
        db.execute("UPDATE bookies SET expires_at = expires_at - 7200")  # as written by a clock 2 h behind
        db.execute("UPDATE locks SET expires_at = expires_at + 7200")
        for bookie, boot, expires_at in (("b-other-boot", "another-boot", 0.0), ("b-old-live", None, 1e12),
                                         ("b-old-expired", None, 1.0)):
            db.execute("INSERT INTO bookies (id, data, expires_at, boot, expires_mono) VALUES (?, ?, ?, ?, ?)",
                       (bookie, BookieInfo(bookie, "127.0.0.1:2").serialize(), expires_at, boot, 1e12))
        db.execute("INSERT INTO locks (name, holder, token, expires_at, boot, expires_mono) "
                   "VALUES ('other-boot', 'x', 't1', 1e12, 'another-boot', 1e12), ('old', 'y', 't2', 1.0, NULL, NULL)")
    assert [b.bookie_id for b in await store.list_bookies()] == ["b-live", "b-old-live"]
    assert await store.lock_holder("live") == "holder"
    assert await store.lock_holder("other-boot") is None and await store.lock_holder("old") is None
    assert await store.try_lock("other-boot", "heir", 30.0, nursery) is not None
    assert await store.try_lock("old", "heir", 30.0, nursery) is not None
    assert await store.try_lock("live", "heir", 30.0, nursery) is None
    await store.aclose()


async def test_leases_are_renewed_while_the_store_is_busy(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A registration's and a lock's heartbeats go through a connection of their own: a slow
    call holding the store's connection (here until the renewals are seen) does not hold them
    back. Behind such calls, a renewal once came 14.1 s late against a TTL of 6 s."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    ttl = 0.6  # renewed every 0.2 s
    await store.register_bookie(BookieInfo("b-1", "127.0.0.1:1"), ttl, nursery)
    assert await store.try_lock("auditor", "holder", ttl, nursery) is not None

    def expiries() -> tuple[float, float]:
        with sqlite3.connect(tmp_path / "meta.db") as db:  # as another process sees the rows
            (bookie,) = db.execute("SELECT expires_mono FROM bookies WHERE id = 'b-1'").fetchone()
            (lock,) = db.execute("SELECT expires_mono FROM locks WHERE name = 'auditor'").fetchone()
        return bookie, lock

    first = expiries()
    release = threading.Event()
    busy = trio.Event()

    async def slow_call() -> None:
        def occupy(db: sqlite3.Connection) -> None:
            trio.from_thread.run_sync(busy.set)
            release.wait(60)

        await store._call(occupy)

    nursery.start_soon(slow_call)
    await busy.wait()
    try:
        with trio.fail_after(30):  # without a connection of their own: never, until released
            while not all(now > before for now, before in zip(await trio.to_thread.run_sync(expiries), first)):
                await trio.sleep(0.05)
    finally:
        release.set()
    await store.aclose()


async def test_a_renewal_does_not_wait_for_the_disk(tmp_path: Path, nursery: trio.Nursery) -> None:
    """Renewals commit without an fsync of their own: under the suite's load, two renewals
    that each waited on the disk came 10.8 s apart against a TTL of 6 s, and an auditor found
    a live bookie lost. Other processes see a renewal at once all the same."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    ttl = 0.6
    await store.register_bookie(BookieInfo("b-1", "127.0.0.1:1"), ttl, nursery)

    def expiry() -> float:
        with sqlite3.connect(tmp_path / "meta.db") as db:  # as another process sees the row
            return float(db.execute("SELECT expires_mono FROM bookies WHERE id = 'b-1'").fetchone()[0])

    first = expiry()
    with trio.fail_after(10):
        while expiry() <= first:
            await trio.sleep(0.05)
    synchronous = await store._call(lambda db: db.execute("PRAGMA synchronous").fetchone()[0], lease=True)
    assert synchronous == 1, "the renewals' connection syncs each commit (1 is NORMAL: no fsync in WAL)"
    assert await store._call(lambda db: db.execute("PRAGMA synchronous").fetchone()[0]) == 2  # FULL
    await store.aclose()


async def test_a_slow_renewal_is_followed_by_the_next_at_once(nursery: trio.Nursery) -> None:
    """Renewals start every third of the TTL from the last one's start: after one that took
    most of a TTL, the next starts at once (it used to wait another third, and the row
    expired in between)."""
    from bkframe.plugins.sqlite_leases import SqliteRegistration

    starts: list[float] = []

    class SlowOnce:
        async def _upsert_bookie(self, info: BookieInfo, ttl_s: float, replace: object = None, *, lease: bool = False) -> None:
            starts.append(trio.current_time())
            if len(starts) == 1:
                await trio.sleep(0.8 * ttl_s)

    ttl = 1.5
    registration = SqliteRegistration(SlowOnce(), BookieInfo("b-1", "127.0.0.1:1"), ttl)  # type: ignore[arg-type]
    nursery.start_soon(registration._heartbeat)
    with trio.fail_after(10):
        while len(starts) < 3:
            await trio.sleep(0.01)
    await registration._heartbeats.stop()
    assert starts[1] - starts[0] < 0.8 * ttl + 0.2, starts  # at once after the slow one
    assert starts[2] - starts[1] > ttl / 3 - 0.05, starts  # then every third of the TTL again
