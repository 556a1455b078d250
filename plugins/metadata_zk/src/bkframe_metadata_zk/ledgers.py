"""The ZooKeeper store's ledgers: metadata in a hierarchy, an index by bookie, ids in blocks.

Layout under ROOT (see :mod:`bkframe_metadata_zk.layout` for the paths of an id)::

    ROOT/ledgers/000/0000/0000/0001/L2345           ledger 12345's metadata (JSON); the znode
                                                    version is the CAS version
    ROOT/bookieledgers/<bookie id>/000/.../L2345    empty: the ledger names the bookie
    ROOT/idcounter                                  the last ledger id handed out (decimal)

Each create, update and delete of a ledger is one ZooKeeper multi with its index entries,
so the index never disagrees with the metadata; an update reads the stored metadata first
and writes the difference of the two ensembles' bookies, under the version it read.

The buckets (inner nodes) are made once: the store remembers those it made or found, so a
create is one multi, not a round trip per level. A listing that finds a bucket empty
deletes it (a concurrent create into it then fails on the missing parent and makes it
again), so the ranges of deleted ledgers cost later listings nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

import anyio
from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import NodeExistsError, NoNodeError

from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BadVersionError, LedgerExistsError, MetadataError, NoSuchLedgerError
from bkframe_metadata_zk.layout import leaf_path, walk

log = logging.getLogger("bkframe.metadata.zk")

T = TypeVar("T")
#: How many times a multi is sent again after a bucket it needed was pruned meanwhile.
BUCKET_RETRIES = 10


def _failed(results: list[Any]) -> bool:
    return any(isinstance(r, Exception) for r in results)


class ZkLedgers:
    """Mixed into :class:`~bkframe_metadata_zk.store.ZkMetadataStore`."""

    root: str
    uri: str
    zk: KazooClient
    _started: bool
    _limiter: anyio.CapacityLimiter
    #: Bucket paths known to exist (made or seen by this store; a hint, checked by the multi).
    _buckets: set[str]
    #: The id counter as last seen: (last id handed out, znode version), or None.
    _counter: tuple[int, int] | None

    async def _start(self) -> None:
        raise NotImplementedError

    async def _call(self, fn: Callable[[KazooClient], T]) -> T:
        raise NotImplementedError

    def _ledgers_base(self) -> str:
        return f"{self.root}/ledgers"

    def _index_base(self, bookie_id: str) -> str:
        return f"{self.root}/bookieledgers/{bookie_id}"

    def _ledger(self, ledger_id: int) -> str:
        return leaf_path(self._ledgers_base(), ledger_id)

    def _index(self, bookie_id: str, ledger_id: int) -> str:
        return leaf_path(self._index_base(bookie_id), ledger_id)

    # -- buckets ---------------------------------------------------------------------------

    def _ensure(self, zk: KazooClient, path: str) -> None:
        """In a kazoo thread: make the bucket ``path`` and its parents unless known to exist."""
        if path in self._buckets:
            return
        for _ in range(BUCKET_RETRIES):
            try:
                zk.create(path)
            except NodeExistsError:
                pass
            except NoNodeError:
                # The parent is gone though it may be cached (pruned, maybe two levels deep,
                # by another process's listing -- and maybe again right after we made it):
                # forget every ancestor, make them again, and try once more.
                self._forget_buckets(path)
                self._ensure(zk, path.rsplit("/", 1)[0])
                continue
            self._buckets.add(path)
            return
        raise MetadataError(f"ZooKeeper metadata store {self.uri}: bucket {path} kept vanishing under a create; try again")

    def _commit(self, zk: KazooClient, build: Callable[[TransactionRequest], None], creates: Iterable[str]) -> list[Any]:
        """In a kazoo thread: one multi, after making the parents of the nodes it creates.
        If a parent was pruned meanwhile (its create fails on a missing node), make it again
        and send the multi again. Returns the multi's results (the caller reads failures)."""
        parents = sorted({path.rsplit("/", 1)[0] for path in creates})
        for _ in range(BUCKET_RETRIES):
            for parent in parents:
                self._ensure(zk, parent)
            txn = zk.transaction()
            build(txn)
            results: list[Any] = txn.commit()
            if not _failed(results) or not any(isinstance(r, NoNodeError) for r in results):
                return results
            missing = [p for p in parents if zk.exists(p) is None]
            if not missing:
                return results
            self._buckets.difference_update(missing)
        raise MetadataError(f"ZooKeeper metadata store {self.uri}: buckets kept vanishing under a create; try again")

    def _forget_buckets(self, path: str) -> None:
        """Forget that the buckets above the node ``path`` exist (one was pruned meanwhile,
        maybe more than one level): the next :meth:`_ensure` makes them again if need be."""
        while (path := path.rsplit("/", 1)[0]) != self.root and path.startswith(self.root + "/"):
            if path.count("/") > self.root.count("/") + 1:  # ROOT/ledgers etc. are never pruned
                self._buckets.discard(path)

    def _prune(self, path: str) -> None:
        """From a listing (kazoo thread): delete the empty bucket ``path``, without waiting.
        A create that put a node in it meanwhile makes the delete fail, as it should."""
        self._buckets.discard(path)
        self.zk.delete_async(path)

    def _children(self, zk: KazooClient) -> Callable[[str], list[str] | None]:
        def children(path: str) -> list[str] | None:
            try:
                return list(zk.get_children(path))
            except NoNodeError:
                return None

        return children

    # -- ids -----------------------------------------------------------------------------------

    async def new_ledger_id(self) -> int:
        return (await self.new_ledger_ids(1))[0]

    async def new_ledger_ids(self, count: int) -> range:
        """One CAS of ``ROOT/idcounter`` at the version this store saw last: one round trip
        unless another client took ids since, then a read and a CAS again."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        path = f"{self.root}/idcounter"

        def take(zk: KazooClient) -> range:
            while True:
                seen = self._counter
                if seen is None:
                    data, stat = zk.get(path)
                    seen = int(data or b"0"), int(stat.version)
                last, version = seen
                try:
                    stat = zk.set(path, str(last + count).encode(), version=version)
                except ZkBadVersion:
                    self._counter = None
                    continue
                self._counter = last + count, int(stat.version)
                return range(last + 1, last + count + 1)

        return await self._call(take)

    # -- ledger metadata -----------------------------------------------------------------------

    async def create_ledger(self, metadata: LedgerMetadata) -> LedgerMetadata:
        data = metadata.serialize()
        path = self._ledger(metadata.ledger_id)
        index = [self._index(b, metadata.ledger_id) for b in sorted(metadata.bookies())]

        def build(txn: TransactionRequest) -> None:
            txn.create(path, data)
            for node in index:
                txn.create(node)

        def create(zk: KazooClient) -> int:
            results = self._commit(zk, build, [path, *index])
            if isinstance(results[0], NodeExistsError):
                # A multi sent again after a connection loss (kazoo's retry) finds the node its
                # first send made: the very same bytes are this create's, not another's. Taken
                # for another's, the client would move to the next id and leave this one an
                # open, empty ledger nobody knows (the soak's defect 3).
                try:
                    stored, stat = zk.get(path)
                except NoNodeError:
                    stored = None
                if stored == data:
                    return int(stat.version)
                raise LedgerExistsError(metadata.ledger_id)
            if _failed(results):
                raise MetadataError(f"ZooKeeper metadata store {self.uri}: creating ledger {metadata.ledger_id}: {results!r}")
            return 0

        return LedgerMetadata.deserialize(data, await self._call(create))

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        path = self._ledger(ledger_id)

        def read(zk: KazooClient) -> tuple[bytes, Any]:
            try:
                return zk.get(path)
            except NoNodeError:
                # ZooKeeper serves reads from the member this session is on, which may lag
                # the leader: a ledger another client created a moment ago can look absent
                # here (a bookie's key check would then refuse its first add as "no such
                # ledger"). "Absent" is an answer callers act on, so make it a fresh one:
                # sync the member with the leader, then look again.
                zk.sync(path)
                return zk.get(path)

        try:
            data, stat = await self._call(read)
        except NoNodeError:
            raise NoSuchLedgerError(ledger_id) from None
        return LedgerMetadata.deserialize(data, stat.version)

    def _read(self, zk: KazooClient, ledger_id: int) -> tuple[LedgerMetadata, int]:
        try:
            data, stat = zk.get(self._ledger(ledger_id))
        except NoNodeError:
            raise NoSuchLedgerError(ledger_id) from None
        return LedgerMetadata.deserialize(data, stat.version), int(stat.version)

    def _update_once(self, zk: KazooClient, metadata: LedgerMetadata, expected_version: int) -> int | None:
        """In a kazoo thread: read the stored metadata, then one multi of the new metadata at
        ``expected_version`` and the index entries of the bookies that came and went. The new
        version, or None if the ledger moved or went between the read and the multi."""
        ledger_id = metadata.ledger_id
        stored, version = self._read(zk, ledger_id)
        if version != expected_version:
            raise BadVersionError(f"ledger {ledger_id} is at version {version}, not {expected_version}")
        old, new = stored.bookies(), metadata.bookies()
        added = [self._index(b, ledger_id) for b in sorted(new - old)]
        removed = [self._index(b, ledger_id) for b in sorted(old - new)]

        def build(txn: TransactionRequest) -> None:
            txn.set_data(self._ledger(ledger_id), metadata.serialize(), version=expected_version)
            for node in added:
                txn.create(node)
            for node in removed:
                txn.delete(node)

        results = self._commit(zk, build, added)
        if not _failed(results):
            return int(results[0].version)
        if isinstance(results[0], ZkBadVersion | NoNodeError):
            return None
        raise MetadataError(f"ZooKeeper metadata store {self.uri}: updating ledger {ledger_id} failed: {results!r}")

    async def update_ledger(self, metadata: LedgerMetadata, expected_version: int) -> LedgerMetadata:
        def cas(zk: KazooClient) -> int:
            while (version := self._update_once(zk, metadata, expected_version)) is None:
                pass  # read again: the read says whether it moved (BadVersionError) or went
            return version

        version = await self._call(cas)
        return LedgerMetadata.deserialize(metadata.serialize(), version)

    async def delete_ledger(self, ledger_id: int) -> None:
        path = self._ledger(ledger_id)

        def delete(zk: KazooClient) -> None:
            while True:
                stored, version = self._read(zk, ledger_id)
                index = [self._index(b, ledger_id) for b in sorted(stored.bookies())]
                txn = zk.transaction()
                txn.delete(path, version=version)
                for node in index:
                    txn.delete(node)
                results = txn.commit()
                if not _failed(results):
                    return
                if not isinstance(results[0], (ZkBadVersion, NoNodeError)):
                    raise MetadataError(f"ZooKeeper metadata store {self.uri}: deleting ledger {ledger_id} failed: {results!r}")

        await self._call(delete)

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        base = self._ledgers_base()
        return await self._call(lambda zk: walk(self._children(zk), base, start=start, limit=limit, on_empty=self._prune))

    async def ledgers_of_bookie(self, bookie_id: str, *, start: int = 0, limit: int | None = None) -> list[int]:
        base = self._index_base(bookie_id)
        return await self._call(lambda zk: walk(self._children(zk), base, start=start, limit=limit, on_empty=self._prune))

    async def watch_ledger(self, ledger_id: int) -> AsyncIterator[LedgerMetadata | None]:
        if not self._started:
            await self._start()
        send, receive = anyio.create_memory_object_stream[tuple[bytes, Any] | None](64)
        token = anyio.lowlevel.current_token()
        stopped = False

        def on_change(data: bytes | None, stat: Any, event: Any = None) -> bool:
            if stopped:
                return False
            value = None if data is None or stat is None else (data, stat.version)
            try:
                anyio.from_thread.run_sync(send.send_nowait, value, token=token)
            except (RuntimeError, anyio.WouldBlock, anyio.ClosedResourceError):
                return False
            return value is not None

        await anyio.to_thread.run_sync(lambda: self.zk.DataWatch(self._ledger(ledger_id), on_change), limiter=self._limiter)
        try:
            async with receive:
                async for item in receive:
                    if item is None:
                        yield None
                        return
                    yield LedgerMetadata.deserialize(item[0], item[1])
        finally:
            stopped = True
