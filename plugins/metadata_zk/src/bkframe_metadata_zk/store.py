"""ZooKeeper metadata store on kazoo.

Layout under ROOT (in the spirit of BookKeeper's):

    ROOT/cluster                    the cluster record (JSON), created once
    ROOT/bookies                    its data changes with every change of a bookie's data (below)
    ROOT/bookies/<bookie id>        ephemeral: a live bookie's BookieInfo (JSON)
    ROOT/cookies/<bookie id>        cookies; the znode version is the CAS version
    ROOT/logs/<name>                a named log's record; the znode version is the CAS version
    ROOT/logs/<name>/<cursor>       its cursors (children, so the log and its cursors go together)

the ledgers, their index by bookie and the id counter of :mod:`bkframe_metadata_zk.ledgers`,
and the autorecovery records (locks, under-replicated marks, decommissioned bookies) of
:mod:`bkframe_metadata_zk.autorecovery`.

``list_bookies`` keeps the bookies it read with the stat of ``ROOT/bookies`` it read them
at: the node's ``cversion`` moves with every registration made or gone (an expired session
too) and its version with every change of a registration's data (``set_read_only`` writes
both in one multi), so one ``exists`` tells whether the list it holds is current, whatever
the number of bookies; when it is not, the children are read again in one round trip of
pipelined reads.

kazoo is blocking and runs its own threads: every call goes through
``anyio.to_thread.run_sync`` with the store's limiter, and watch callbacks come back into
trio through a memory channel. Ephemeral nodes vanish when the session expires (a dead
bookie); a registration re-creates its node when a new session is established.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio
import attrs
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as ZkBadVersion
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from bkframe.core.interfaces import Spawner
from bkframe.core.interfaces.metadata_store import LogChange, check_log_changes
from bkframe.core.metadata import BookieInfo, ClusterRecord, Versioned, id_in_use
from bkframe.errors import BadVersionError, BookieIdInUseError, LogExistsError, MetadataError, NoSuchLogError
from bkframe_metadata_zk.autorecovery import PATHS, ZkAutorecovery, ZkLock
from bkframe_metadata_zk.ledgers import ZkLedgers

log = logging.getLogger("bkframe.metadata.zk")

SCHEME = "zk://"
T = TypeVar("T")
#: Session timeout: how long after a bookie dies its registration disappears.
SESSION_TIMEOUT_S = 6.0
#: How long a call keeps retrying through connection loss before it fails.
DEADLINE_S = 30.0


def parse_uri(uri: str) -> tuple[str, str]:
    rest = uri[len(SCHEME) :]
    hosts, _, root = rest.partition("/")
    if not hosts:
        raise MetadataError(f"metadata URI {uri!r} names no ZooKeeper host; use zk://HOST:PORT/ROOT")
    return hosts, "/" + root.strip("/") if root.strip("/") else "/bkframe"


class ZkRegistration:
    def __init__(self, store: ZkMetadataStore, info: BookieInfo, replace: BookieInfo | None = None) -> None:
        self._store = store
        self.info = info
        #: A stale registration the first claim may replace (see MetadataStore.register_bookie).
        self.replace = replace
        self._closed = False

    def _node(self) -> str:
        return f"{self._store.root}/bookies/{self.info.bookie_id}"

    def claim(self) -> None:
        """In a kazoo thread: create the ephemeral node; one left by this bookie's previous
        life (a session that has not expired yet) is replaced, another bookie's never is."""
        path = self._node()
        zk = self._store.zk
        while True:
            try:
                zk.create(path, self.info.serialize(), ephemeral=True, makepath=True)
                self.replace = None
                return
            except NodeExistsError:
                try:
                    data, stat = zk.get(path)
                except NoNodeError:
                    continue
                held = BookieInfo.deserialize(data)
                if not held.same_bookie(self.info) and held != self.replace:
                    raise id_in_use(held, self.info) from None
                try:
                    zk.delete(path, version=stat.version)
                except (NoNodeError, ZkBadVersion):
                    pass

    def _ours(self, zk: KazooClient) -> int | None:
        """The node's version if it is this bookie's registration, else None."""
        try:
            data, stat = zk.get(self._node())
        except NoNodeError:
            return None
        return int(stat.version) if BookieInfo.deserialize(data).same_bookie(self.info) else None

    def recreate(self) -> None:
        """In a kazoo thread: put the ephemeral node back after a new session."""
        if self._closed:
            return
        try:
            self.claim()
            log.warning("bookie %s registered again after the session was lost", self.info.bookie_id)
        except BookieIdInUseError as e:
            log.error("bookie %s cannot register again: %s", self.info.bookie_id, e)
        except KazooException as e:
            log.warning("bookie %s could not register again yet: %s", self.info.bookie_id, e)

    async def set_read_only(self, read_only: bool) -> None:
        self.info = attrs.evolve(self.info, read_only=read_only)

        def update(zk: KazooClient) -> None:
            version = self._ours(zk)
            if version is None:  # the session's node is gone; recreate() puts it back
                return
            # The parent's version moves too: that is how list_bookies sees a data change.
            txn = zk.transaction()
            txn.set_data(self._node(), self.info.serialize(), version=version)
            txn.set_data(f"{self._store.root}/bookies", b"")
            results = txn.commit()
            if isinstance(results[0], ZkBadVersion | NoNodeError):
                return  # replaced or gone meanwhile: as above
            if any(isinstance(r, Exception) for r in results):
                raise MetadataError(f"ZooKeeper metadata store {self._store.uri}: marking {self.info.bookie_id}: {results!r}")

        await self._store._call(update)

    async def aclose(self) -> None:
        self._closed = True
        self._store._registrations.discard(self)

        def delete(zk: KazooClient) -> None:
            version = self._ours(zk)  # after an expiry the id may be another bookie's
            if version is not None:
                try:
                    zk.delete(self._node(), version=version)
                except (NoNodeError, ZkBadVersion):
                    pass

        await self._store._call(delete)


class ZkMetadataStore(ZkLedgers, ZkAutorecovery):
    def __init__(self, uri: str) -> None:
        self.uri = uri
        hosts, self.root = parse_uri(uri)
        self.zk = KazooClient(
            hosts=hosts,
            timeout=SESSION_TIMEOUT_S,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0, deadline=DEADLINE_S),
        )
        self._limiter = anyio.CapacityLimiter(4)
        self._started = False
        self._start_lock = anyio.Lock()
        self._registrations: set[ZkRegistration] = set()
        self._locks: dict[str, ZkLock] = {}
        self._lost = False
        self._buckets: set[str] = set()
        self._counter: tuple[int, int] | None = None
        #: ((czxid, cversion, version) of ROOT/bookies, the bookies read at it), see the module docstring.
        self._bookies: tuple[tuple[int, int, int], list[BookieInfo]] | None = None
        self.zk.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        # Called from a kazoo thread: never block here, hand work to kazoo's handler.
        self._watch_suspension(state, SESSION_TIMEOUT_S)
        if state == KazooState.LOST:
            self._lost = True
            self._locks_lost(forget=True)  # unlike registrations, a lock is never taken again by itself
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            for reg in list(self._registrations):
                self.zk.handler.spawn(reg.recreate)

    async def _start(self) -> None:
        async with self._start_lock:
            if self._started:
                return

            def start() -> None:
                try:
                    self.zk.start(timeout=10)
                except Exception as e:  # noqa: BLE001 - kazoo raises its own timeout type
                    self.zk.stop()
                    raise MetadataError(
                        f"cannot reach the ZooKeeper metadata store {self.uri!r} ({e}); is ZooKeeper running at that address?"
                    ) from None
                paths = [f"{self.root}/{p}" for p in ("ledgers", "bookieledgers", "bookies", "cookies", "logs", *PATHS)]

                def layout(zk: KazooClient) -> None:
                    for path in paths:
                        zk.ensure_path(path)
                    try:
                        zk.create(f"{self.root}/idcounter", b"0")
                    except NodeExistsError:
                        pass  # made before, or by this very call before the connection dropped

                # Through connection loss like every later call: the member it connected to
                # may die or lose its quorum right after (found by the seeded fault runs).
                try:
                    self.zk.retry(layout, self.zk)
                except KazooException as e:
                    raise MetadataError(f"ZooKeeper metadata store {self.uri}: {e!r}") from None
                self._buckets.update(paths)

            await anyio.to_thread.run_sync(start, limiter=self._limiter)
            self._started = True

    async def _call(self, fn: Callable[[KazooClient], T]) -> T:
        if not self._started:
            await self._start()

        def run() -> T:
            try:
                return self.zk.retry(fn, self.zk)
            except (MetadataError, NoNodeError, NodeExistsError, ZkBadVersion):
                raise
            except KazooException as e:
                raise MetadataError(f"ZooKeeper metadata store {self.uri}: {e!r}") from None

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    async def _write_versioned(self, path: str, value: bytes, expected_version: int | None) -> int:
        """Create ``path`` (``expected_version`` None) or set it if it is at ``expected_version``;
        its new version. kazoo's NodeExistsError, BadVersionError and NoNodeError pass through:
        the caller says what the node is (a cookie, a log, a cursor)."""
        if expected_version is None:
            await self._call(lambda zk: zk.create(path, value))
            return 0
        stat = await self._call(lambda zk: zk.set(path, value, version=expected_version))
        return int(stat.version)

    # -- the cluster record --------------------------------------------------------------

    async def init_cluster(self, record: ClusterRecord) -> bool:
        try:
            await self._call(lambda zk: zk.create(f"{self.root}/cluster", record.serialize()))
        except NodeExistsError:
            return False
        return True

    async def read_cluster(self) -> ClusterRecord | None:
        try:
            data, _ = await self._call(lambda zk: zk.get(f"{self.root}/cluster"))
        except NoNodeError:
            return None
        return ClusterRecord.deserialize(data)

    # -- bookies -------------------------------------------------------------------------

    async def register_bookie(
        self, info: BookieInfo, ttl_s: float, nursery: Spawner, *, replace: BookieInfo | None = None
    ) -> ZkRegistration:
        """``ttl_s`` is bounded by the ZooKeeper session timeout (``SESSION_TIMEOUT_S``);
        kazoo keeps the session alive, so nothing runs in ``nursery``."""
        registration = ZkRegistration(self, info, replace)
        await self._call(lambda zk: registration.claim())
        self._registrations.add(registration)
        return registration

    async def list_bookies(self, *, writable_only: bool = False) -> list[BookieInfo]:
        """One round trip while the bookies are as last read (two requests with
        ``writable_only``), one more after a change; see the module docstring."""
        path = f"{self.root}/bookies"

        def read(zk: KazooClient) -> tuple[list[BookieInfo], list[str]]:
            stat_reply = zk.exists_async(path)
            decommissioned_reply = zk.get_children_async(f"{self.root}/decommissioned") if writable_only else None
            stat = stat_reply.get()
            decommissioned = [] if decommissioned_reply is None else list(decommissioned_reply.get())
            if stat is None:
                return [], decommissioned
            at = (int(stat.czxid), int(stat.cversion), int(stat.version))
            held = self._bookies
            if held is not None and held[0] == at:
                return held[1], decommissioned
            replies = [zk.get_async(f"{path}/{name}") for name in zk.get_children(path)]
            infos = []
            for reply in replies:
                try:
                    data, _ = reply.get()
                except NoNodeError:
                    continue
                infos.append(BookieInfo.deserialize(data))
            infos.sort(key=lambda b: b.bookie_id)
            # Kept at the stat read before the children: a change meanwhile shows next time.
            self._bookies = at, infos
            return infos, decommissioned

        infos, decommissioned = await self._call(read)
        if not writable_only:
            return list(infos)
        return [b for b in infos if not (b.read_only or b.bookie_id in decommissioned)]

    # -- cookies -------------------------------------------------------------------------

    async def read_cookie(self, bookie_id: str) -> Versioned | None:
        try:
            data, stat = await self._call(lambda zk: zk.get(f"{self.root}/cookies/{bookie_id}"))
        except NoNodeError:
            return None
        return Versioned(data, stat.version)

    async def write_cookie(self, bookie_id: str, value: bytes, expected_version: int | None) -> int:
        try:
            return await self._write_versioned(f"{self.root}/cookies/{bookie_id}", value, expected_version)
        except NodeExistsError:
            raise BadVersionError(f"cookie of {bookie_id} already exists") from None
        except (ZkBadVersion, NoNodeError):
            raise BadVersionError(f"cookie of {bookie_id} is not at version {expected_version}") from None

    # -- named logs ----------------------------------------------------------------------

    def _log(self, name: str) -> str:
        return f"{self.root}/logs/{name}"

    async def create_log(self, name: str, value: bytes) -> int:
        try:
            return await self._write_versioned(self._log(name), value, None)
        except NodeExistsError:
            raise LogExistsError(name) from None

    async def read_log(self, name: str) -> Versioned:
        try:
            data, stat = await self._call(lambda zk: zk.get(self._log(name)))
        except NoNodeError:
            raise NoSuchLogError(name) from None
        return Versioned(data, stat.version)

    async def update_log(self, name: str, value: bytes, expected_version: int) -> int:
        try:
            return await self._write_versioned(self._log(name), value, expected_version)
        except NoNodeError:
            raise NoSuchLogError(name) from None
        except ZkBadVersion:
            raise BadVersionError(f"log {name!r} is not at version {expected_version}") from None

    async def update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        """One multi-op of versioned sets (ZooKeeper applies all of a multi or none); a
        log's cursors are its node's children, so only the log nodes' own data changes."""
        checked = check_log_changes(changes)
        if not checked:
            return []

        def multi(zk: KazooClient) -> list[ZnodeStat | Exception]:
            txn = zk.transaction()
            for name, value, expected_version in checked:
                txn.set_data(self._log(name), value, version=expected_version)
            return list(txn.commit())

        results = await self._call(multi)
        for (name, _, expected_version), result in zip(checked, results):
            if isinstance(result, NoNodeError):
                raise NoSuchLogError(name)
            if isinstance(result, ZkBadVersion):
                raise BadVersionError(f"log {name!r} is not at version {expected_version}")
        stats = [r for r in results if isinstance(r, ZnodeStat)]
        if len(stats) != len(checked):
            raise MetadataError(f"ZooKeeper metadata store {self.uri}: updating logs failed: {results!r}")
        return [int(stat.version) for stat in stats]

    async def delete_log(self, name: str, expected_version: int | None = None) -> None:
        path = self._log(name)

        def delete(zk: KazooClient) -> None:
            # One multi-op: the cursors and the record go together. A cursor made (or
            # deleted) meanwhile fails it; then list the children again.
            while True:
                children = zk.get_children(path)
                txn = zk.transaction()
                for child in children:
                    txn.delete(f"{path}/{child}")
                txn.delete(path, version=-1 if expected_version is None else expected_version)
                results = txn.commit()
                errors = [r for r in results if isinstance(r, Exception)]
                if not errors:
                    return
                if isinstance(results[-1], ZkBadVersion):
                    raise BadVersionError(f"log {name!r} is not at version {expected_version}")
                if isinstance(results[-1], NoNodeError):
                    raise NoNodeError()
                if any(isinstance(r, (NotEmptyError, NoNodeError)) for r in results):
                    continue
                raise MetadataError(f"ZooKeeper metadata store {self.uri}: deleting log {name!r} failed: {errors!r}")

        try:
            await self._call(delete)
        except NoNodeError:
            raise NoSuchLogError(name) from None

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        # ZooKeeper lists a node's children whole (one request, no range): the page is cut
        # here. Logs are far fewer than ledgers (10^5 names are ~2 MB: one request).
        names = sorted(n for n in await self._call(lambda zk: zk.get_children(f"{self.root}/logs")) if n >= start)
        return names if limit is None else names[: max(limit, 0)]

    async def count_logs(self) -> int:
        # The node's stat counts its children: no name travels.
        stat = await self._call(lambda zk: zk.exists(f"{self.root}/logs"))
        return 0 if stat is None else int(stat.numChildren)

    async def read_cursor(self, log: str, cursor: str) -> Versioned | None:
        try:
            data, stat = await self._call(lambda zk: zk.get(f"{self._log(log)}/{cursor}"))
        except NoNodeError:
            return None
        return Versioned(data, stat.version)

    async def write_cursor(self, log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
        try:
            return await self._write_versioned(f"{self._log(log)}/{cursor}", value, expected_version)
        except NodeExistsError:
            raise BadVersionError(f"cursor {cursor!r} of log {log!r} already exists") from None
        except ZkBadVersion:
            raise BadVersionError(f"cursor {cursor!r} of log {log!r} is not at version {expected_version}") from None
        except NoNodeError:
            if not await self._call(lambda zk: zk.exists(self._log(log))):
                raise NoSuchLogError(log) from None
            raise BadVersionError(f"cursor {cursor!r} of log {log!r} does not exist") from None

    async def delete_cursor(self, log: str, cursor: str) -> bool:
        try:
            await self._call(lambda zk: zk.delete(f"{self._log(log)}/{cursor}"))
        except NoNodeError:
            return False
        return True

    async def list_cursors(self, log: str) -> dict[str, Versioned]:
        def read(zk: KazooClient) -> dict[str, Versioned]:
            out = {}
            try:
                children = zk.get_children(self._log(log))
            except NoNodeError:
                return {}
            for child in sorted(children):
                try:
                    data, stat = zk.get(f"{self._log(log)}/{child}")
                except NoNodeError:
                    continue
                out[child] = Versioned(data, stat.version)
            return out

        return await self._call(read)

    async def aclose(self) -> None:
        if self._started:
            await anyio.to_thread.run_sync(lambda: (self.zk.stop(), self.zk.close()), limiter=self._limiter)
