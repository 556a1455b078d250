"""The ZooKeeper store's autorecovery records: locks, under-replicated marks, decommissioned bookies.

Layout under ROOT (next to the store's own, see :mod:`bkframe_metadata_zk.store`)::

    ROOT/locks/<name, URL-quoted>          ephemeral: a held lock; data = the holder
    ROOT/underreplicated/000/0000/0001/2345/L6789  ledger 123456789's mark: {"bookies": [...],
                                           "since": unix time}; CAS on the znode version
    ROOT/decommissioned/<bookie id>        persistent, empty: the bookie takes no new writes

A lock is an ephemeral node of the store's session: it dies with the session (the holder
dies: about ``SESSION_TIMEOUT_S``), and every lock the store holds is ``lost`` when kazoo
reports the session LOST, or as soon as the connection is SUSPENDED: kazoo notices a
silent connection about two thirds into the timeout, so the server may expire the session
(and give the lock to another) a third later, while the holder would hear of it only once
it reaches the server again.

Marks live in the ledgers' hierarchy of buckets (:mod:`bkframe_metadata_zk.layout`: at most
10^4 children per node, however many ledgers a lost bookie held), made as the ledgers' are
and pruned by the listings that find them empty. Marks are read, merged and written back
with the version they were read at, again on a conflict; an emptied mark is deleted at that
version. A page of marks is pipelined: every read sent before the first answer is awaited,
then every write, and only the ledgers whose write met a conflict go round again, so each
ledger's mark stays a CAS of its own (a multi would fail the whole page on one conflict).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from typing import TypeVar
from urllib.parse import quote

import anyio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError

from bkframe.core.interfaces import Spawner
from bkframe.core.metadata import UnderReplicated
from bkframe_metadata_zk.layout import leaf_path, lowest_buckets, walk

log = logging.getLogger("bkframe.metadata.zk")

T = TypeVar("T")
#: The directories under ROOT that this module keeps.
PATHS = ("locks", "underreplicated", "decommissioned")
#: Requests a listing of marks sends before it awaits their answers.
READS_IN_FLIGHT = 1_000


class ZkLock:
    def __init__(self, store: ZkAutorecovery, name: str, holder: str, path: str, owner: int) -> None:
        self._store = store
        self.name = name
        self.holder = holder
        self._path = path
        #: The session that owns the node: only that node is ours to delete.
        self._owner = owner
        self.lost = anyio.Event()
        self._token = anyio.lowlevel.current_token()

    def session_lost(self) -> None:
        """From a kazoo thread: the session (and with it the node) is gone."""
        try:
            anyio.from_thread.run_sync(self.lost.set, token=self._token)
        except RuntimeError:  # the event loop has finished
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

    def _ensure(self, zk: KazooClient, path: str) -> None:
        raise NotImplementedError

    def _forget_buckets(self, path: str) -> None:
        raise NotImplementedError

    def _prune(self, path: str) -> None:
        raise NotImplementedError

    def _children(self, zk: KazooClient) -> Callable[[str], list[str] | None]:
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

    def _marks_base(self) -> str:
        return f"{self.root}/underreplicated"

    def _mark_path(self, ledger_id: int) -> str:
        return leaf_path(self._marks_base(), ledger_id)

    # -- locks -----------------------------------------------------------------------------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: Spawner) -> ZkLock | None:
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
        await self.mark_many_under_replicated([ledger_id], bookies)

    async def mark_many_under_replicated(self, ledger_ids: Collection[int], bookies: Collection[str]) -> int:
        adding, todo = set(bookies), sorted(set(ledger_ids))
        paths = {ledger_id: self._mark_path(ledger_id) for ledger_id in todo}

        def mark(zk: KazooClient) -> int:
            nonlocal todo
            changed = 0
            while todo:
                reads = [(ledger_id, zk.get_async(paths[ledger_id])) for ledger_id in todo]
                writes = []
                now = time.time()
                for ledger_id, read in reads:
                    path = paths[ledger_id]
                    try:
                        data, stat = read.get()
                    except NoNodeError:
                        self._ensure(zk, path.rsplit("/", 1)[0])
                        writes.append((ledger_id, zk.create_async(path, _record(adding, now))))
                        continue
                    current = json.loads(data)
                    merged = set(current["bookies"]) | adding
                    if merged != set(current["bookies"]):
                        record = _record(merged, current["since"])
                        writes.append((ledger_id, zk.set_async(path, record, version=stat.version)))
                again = []
                for ledger_id, write in writes:
                    try:
                        write.get()
                        changed += 1
                    except (NodeExistsError, ZkBadVersion):
                        again.append(ledger_id)  # marked or changed meanwhile: read again
                    except NoNodeError:
                        # Cleared meanwhile, or its bucket pruned by a listing: read again,
                        # and make the buckets again if need be.
                        self._forget_buckets(paths[ledger_id])
                        again.append(ledger_id)
                todo = again
            return changed

        return await self._call(mark) if todo else 0

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        """Walks the buckets from ``start`` for ``limit`` ids, then reads those marks,
        pipelined; marks cleared in between are made up for by walking on, so a page is
        short only at the end."""
        base = self._marks_base()

        def read(zk: KazooClient) -> list[UnderReplicated]:
            out: list[UnderReplicated] = []
            first = start
            while limit is None or len(out) < limit:
                want = None if limit is None else limit - len(out)
                ids = walk(self._children(zk), base, start=first, limit=want, on_empty=self._prune)
                for at in range(0, len(ids), READS_IN_FLIGHT):
                    chunk = ids[at : at + READS_IN_FLIGHT]
                    for ledger_id, request in [(i, zk.get_async(self._mark_path(i))) for i in chunk]:
                        try:
                            data, _ = request.get()
                        except NoNodeError:
                            continue  # cleared meanwhile
                        record = json.loads(data)
                        out.append(UnderReplicated(ledger_id, frozenset(record["bookies"]), float(record["since"])))
                if want is None or len(ids) < want:
                    break
                first = ids[-1] + 1
            return out

        return await self._call(read)

    async def count_under_replicated(self) -> int:
        """The ``numChildren`` of each lowest bucket, pipelined: no mark is read."""
        base = self._marks_base()

        def count(zk: KazooClient) -> int:
            buckets = lowest_buckets(self._children(zk), base)
            total = 0
            for at in range(0, len(buckets), READS_IN_FLIGHT):
                for request in [zk.exists_async(path) for path in buckets[at : at + READS_IN_FLIGHT]]:
                    stat = request.get()
                    total += 0 if stat is None else int(stat.numChildren)
            return total

        return await self._call(count)

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
