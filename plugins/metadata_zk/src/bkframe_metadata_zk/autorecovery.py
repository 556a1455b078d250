"""The ZooKeeper store's autorecovery records: locks, under-replicated marks, decommissioned bookies.

Layout under ROOT (next to the store's own, see :mod:`bkframe_metadata_zk.store`)::

    ROOT/locks/<name, URL-quoted>          ephemeral: a held lock; data = the holder
    ROOT/underreplicated/L<id, 19 digits>  {"bookies": [...], "since": unix time}; CAS on the znode version
    ROOT/decommissioned/<bookie id>        persistent, empty: the bookie takes no new writes

A lock is an ephemeral node of the store's session: it dies with the session (the holder
dies: about ``SESSION_TIMEOUT_S``), and every lock the store holds is ``lost`` when kazoo
reports the session LOST, or as soon as the connection is SUSPENDED: kazoo notices a
silent connection about two thirds into the timeout, so the server may expire the session
(and give the lock to another) a third later, while the holder would hear of it only once
it reaches the server again. Marks are read, merged and written back with the version they
were read at, again on a conflict; an emptied mark is deleted at that version.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from typing import TypeVar
from urllib.parse import quote

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from bkframe.core.metadata import UnderReplicated

log = logging.getLogger("bkframe.metadata.zk")

T = TypeVar("T")
#: The directories under ROOT that this module keeps.
PATHS = ("locks", "underreplicated", "decommissioned")


class ZkLock:
    def __init__(self, store: ZkAutorecovery, name: str, holder: str, path: str, owner: int) -> None:
        self._store = store
        self.name = name
        self.holder = holder
        self._path = path
        #: The session that owns the node: only that node is ours to delete.
        self._owner = owner
        self.lost = trio.Event()
        self._token = trio.lowlevel.current_trio_token()

    def session_lost(self) -> None:
        """From a kazoo thread: the session (and with it the node) is gone."""
        try:
            self._token.run_sync_soon(self.lost.set)
        except trio.RunFinishedError:
            pass

    async def release(self) -> None:
        if self._store._locks.get(self.name) is self:  # not a later lock of the same name
            del self._store._locks[self.name]

        def delete(zk: KazooClient) -> None:
            try:
                _, stat = zk.get(self._path)
                if stat.ephemeralOwner == self._owner:
                    zk.delete(self._path, version=stat.version)
            except (NoNodeError, ZkBadVersion):
                pass  # gone already (our session ended): whoever holds it now keeps it

        await self._store._call(delete)


def _record(bookies: Collection[str], since: float) -> bytes:
    return json.dumps({"bookies": sorted(bookies), "since": since}, sort_keys=True).encode()


class ZkAutorecovery:
    """Mixed into :class:`~bkframe_metadata_zk.store.ZkMetadataStore`."""

    root: str
    zk: KazooClient
    _locks: dict[str, ZkLock]
    #: Set while the connection is SUSPENDED (a new object per suspension), else None.

    async def _call(self, fn: Callable[[KazooClient], T]) -> T:
        raise NotImplementedError

    def _locks_lost(self, *, forget: bool) -> None:
        """From a kazoo thread: every lock held through the session is (or may be) gone.
        ``forget`` when the session surely ended (its nodes are gone); otherwise the locks
        stay known until released, so that this store does not take a name again while a
        node of it may still be ours."""
        for lock in list(self._locks.values()):
            lock.session_lost()
        if forget:
            self._locks.clear()

    def _watch_suspension(self, state: str, session_timeout_s: float) -> None:
        """From kazoo's state listener (never blocks): on SUSPENDED the locks are lost at once.

        kazoo notices a dead connection after about two thirds of the session timeout; the
        server may expire the session (and hand the lock to another holder) a third later.
        Waiting any longer here would let two holders act at once, so a lock holder steps
        down as soon as its connection is in doubt (as Curator and kazoo's own recipes
        advise) and takes the lock again once it can."""
        if state != KazooState.SUSPENDED:
            return
        log.warning("ZooKeeper connection suspended: the locks of %s may be lost; their holders stop", self.root)
        self._locks_lost(forget=False)

    def _lock_path(self, name: str) -> str:
        # Lock names have slashes ("ledger/12"); one znode per lock, not a tree.
        return f"{self.root}/locks/{quote(name, safe='')}"

    def _mark_path(self, ledger_id: int) -> str:
        return f"{self.root}/underreplicated/L{ledger_id:019d}"

    # -- locks -----------------------------------------------------------------------------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: trio.Nursery) -> ZkLock | None:
        """``ttl_s`` is bounded by the session timeout; kazoo keeps the session alive, so
        nothing runs in ``nursery``."""
        if name in self._locks:
            return None  # held through this very session
        path = self._lock_path(name)

        def create(zk: KazooClient) -> int | None:
            if zk.client_id is None:  # between sessions: kazoo's retry waits for the next one
                raise ConnectionLoss("no ZooKeeper session yet")
            session = int(zk.client_id[0])
            try:
                zk.create(path, holder.encode(), ephemeral=True)
                return session
            except NodeExistsError:
                # A create retried through a connection loss may have made the node already:
                # then it is ours (no other lock of this session has the name).
                try:
                    _, stat = zk.get(path)
                except NoNodeError:
                    return None
                return session if stat.ephemeralOwner == session else None

        owner = await self._call(create)
        if owner is None:
            return None
        lock = ZkLock(self, name, holder, path, owner)
        self._locks[name] = lock
        return lock

    async def lock_holder(self, name: str) -> str | None:
        def read(zk: KazooClient) -> str | None:
            try:
                data, _ = zk.get(self._lock_path(name))
            except NoNodeError:
                return None
            return bytes(data).decode()

        return await self._call(read)

    # -- under-replicated marks ------------------------------------------------------------

    async def mark_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        path, adding = self._mark_path(ledger_id), set(bookies)

        def mark(zk: KazooClient) -> None:
            while True:
                try:
                    data, stat = zk.get(path)
                except NoNodeError:
                    try:
                        zk.create(path, _record(adding, time.time()))
                        return
                    except NodeExistsError:
                        continue  # marked meanwhile: merge into that one
                current = json.loads(data)
                merged = set(current["bookies"]) | adding
                if merged == set(current["bookies"]):
                    return
                try:
                    zk.set(path, _record(merged, current["since"]), version=stat.version)
                    return
                except (ZkBadVersion, NoNodeError):
                    continue  # changed or cleared meanwhile: read again

        await self._call(mark)

    async def list_under_replicated(self) -> list[UnderReplicated]:
        def read(zk: KazooClient) -> list[UnderReplicated]:
            out = []
            for child in sorted(zk.get_children(f"{self.root}/underreplicated")):
                try:
                    data, _ = zk.get(f"{self.root}/underreplicated/{child}")
                except NoNodeError:
                    continue
                record = json.loads(data)
                out.append(UnderReplicated(int(child[1:]), frozenset(record["bookies"]), float(record["since"])))
            return out

        return await self._call(read)

    async def clear_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        path, removing = self._mark_path(ledger_id), set(bookies)

        def clear(zk: KazooClient) -> None:
            while True:
                try:
                    data, stat = zk.get(path)
                except NoNodeError:
                    return
                current = json.loads(data)
                left = set(current["bookies"]) - removing
                if left == set(current["bookies"]):
                    return
                try:
                    if left:
                        zk.set(path, _record(left, current["since"]), version=stat.version)
                    else:
                        zk.delete(path, version=stat.version)
                    return
                except (ZkBadVersion, NoNodeError):
                    continue  # a mark or clear came first: read again

        await self._call(clear)

    # -- decommissioned bookies ------------------------------------------------------------

    async def set_decommissioned(self, bookie_id: str, decommissioned: bool) -> None:
        path = f"{self.root}/decommissioned/{bookie_id}"

        def write(zk: KazooClient) -> None:
            try:
                if decommissioned:
                    zk.create(path, b"")
                else:
                    zk.delete(path)
            except (NodeExistsError, NoNodeError):
                pass  # already so

        await self._call(write)

    async def list_decommissioned(self) -> set[str]:
        return set(await self._call(lambda zk: zk.get_children(f"{self.root}/decommissioned")))
