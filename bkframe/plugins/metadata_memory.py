"""``memory://NAME``: an in-process metadata store, for unit tests and single-process use.

Stores opened with the same NAME in one process share their state; ``memory://`` alone
is a fresh private store. Registrations vanish on ``aclose`` or on :meth:`MemoryMetadataStore.expire`,
and locks on ``release`` or on :meth:`MemoryMetadataStore.expire_lock`: these stand in for
"the holder died" in tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

import anyio
import attrs

from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.metadata_store import LogChange, check_log_changes
from bkframe.core.metadata import BookieInfo, ClusterRecord, LedgerMetadata, UnderReplicated, Versioned, id_in_use
from bkframe.core.registry import ComponentRegistry
from bkframe.errors import BadVersionError, BKError, LedgerExistsError, LogExistsError, NoSuchLedgerError, NoSuchLogError

if TYPE_CHECKING:  # a type only: the value imports trio (bkframe.core.interfaces)
    from bkframe.core.interfaces import Spawner

SCHEME = "memory://"


@attrs.define
class _State:
    cluster: ClusterRecord | None = None
    ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))
    ledgers: dict[int, LedgerMetadata] = attrs.Factory(dict)
    bookies: dict[str, BookieInfo] = attrs.Factory(dict)
    cookies: dict[str, Versioned] = attrs.Factory(dict)
    logs: dict[str, Versioned] = attrs.Factory(dict)
    #: Cursors by log name, then cursor name.
    cursors: dict[str, dict[str, Versioned]] = attrs.Factory(dict)
    locks: dict[str, MemoryLock] = attrs.Factory(dict)
    under_replicated: dict[int, UnderReplicated] = attrs.Factory(dict)
    decommissioned: set[str] = attrs.Factory(set)
    #: Ledger ids by each bookie their metadata names (ledgers_of_bookie).
    by_bookie: dict[str, set[int]] = attrs.Factory(dict)
    changed: anyio.Event = attrs.Factory(anyio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


_SHARED: dict[str, _State] = {}


def _page(ids: Iterable[int], start: int, limit: int | None) -> list[int]:
    """Ids ``>= start``, ascending, at most ``limit`` (a test store: sorting is fine)."""
    chosen = sorted(i for i in ids if i >= start)
    return chosen if limit is None else chosen[:limit]


K = TypeVar("K")
V = TypeVar("V")


def _held(table: Mapping[K, V], key: K, missing: Callable[[K], BKError]) -> V:
    """The record ``key`` names, or the store's error for one it does not hold."""
    current = table.get(key)
    if current is None:
        raise missing(key)
    return current


def _check_version(what: str, version: int | None, expected_version: int | None) -> None:
    """A compare-and-set's check (None: no record)."""
    if version != expected_version:
        raise BadVersionError(f"{what} is at version {version}, not {expected_version}")


def reset_shared() -> None:
    """Forget every named store (tests call this between cases)."""
    _SHARED.clear()


class MemoryRegistration:
    def __init__(self, store: MemoryMetadataStore, info: BookieInfo) -> None:
        self._store = store
        self.info = info
        self.bookie_id = info.bookie_id

    async def set_read_only(self, read_only: bool) -> None:
        state = self._store._state
        info = state.bookies.get(self.bookie_id)
        if info is not None and info.same_bookie(self.info):
            state.bookies[self.bookie_id] = attrs.evolve(info, read_only=read_only)

    async def aclose(self) -> None:
        held = self._store._state.bookies.get(self.bookie_id)
        if held is not None and held.same_bookie(self.info):  # after an expiry the id may be another's
            self._store.expire(self.bookie_id)


class MemoryLock:
    def __init__(self, state: _State, name: str, holder: str) -> None:
        self._state = state
        self.name = name
        self.holder = holder
        self.lost = anyio.Event()

    async def release(self) -> None:
        await anyio.lowlevel.checkpoint()
        # Only our own entry: after an expiry the name may belong to someone else.
        if self._state.locks.get(self.name) is self:
            del self._state.locks[self.name]


class MemoryMetadataStore:
    def __init__(self, uri: str) -> None:
        self.uri = uri
        name = uri[len(SCHEME) :]
        self._state = _SHARED.setdefault(name, _State()) if name else _State()

    async def init_cluster(self, record: ClusterRecord) -> bool:
        await anyio.lowlevel.checkpoint()
        if self._state.cluster is not None:
            return False
        self._state.cluster = record
        return True

    async def read_cluster(self) -> ClusterRecord | None:
        await anyio.lowlevel.checkpoint()
        return self._state.cluster

    async def new_ledger_id(self) -> int:
        await anyio.lowlevel.checkpoint()
        state = self._state
        while True:
            ledger_id = next(state.ids)
            if ledger_id not in state.ledgers:
                return ledger_id

    async def new_ledger_ids(self, count: int) -> range:
        await anyio.lowlevel.checkpoint()
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        state = self._state
        first = next(state.ids)
        # itertools.count cannot skip: take the rest of the block one by one.
        for _ in range(count - 1):
            next(state.ids)
        return range(first, first + count)

    def _index(self, ledger_id: int, old: set[str], new: set[str]) -> None:
        for bookie in old - new:
            self._state.by_bookie.get(bookie, set()).discard(ledger_id)
        for bookie in new - old:
            self._state.by_bookie.setdefault(bookie, set()).add(ledger_id)

    async def create_ledger(self, metadata: LedgerMetadata) -> LedgerMetadata:
        await anyio.lowlevel.checkpoint()
        if (held := self._state.ledgers.get(metadata.ledger_id)) is not None:
            if held == attrs.evolve(metadata, version=1):
                return held  # this very record: a create sent again
            raise LedgerExistsError(metadata.ledger_id)
        stored = attrs.evolve(metadata, version=1)
        self._state.ledgers[metadata.ledger_id] = stored
        self._index(metadata.ledger_id, set(), stored.bookies())
        self._state.notify()
        return stored

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        await anyio.lowlevel.checkpoint()
        return _held(self._state.ledgers, ledger_id, NoSuchLedgerError)

    async def update_ledger(self, metadata: LedgerMetadata, expected_version: int) -> LedgerMetadata:
        await anyio.lowlevel.checkpoint()
        current = _held(self._state.ledgers, metadata.ledger_id, NoSuchLedgerError)
        _check_version(f"ledger {metadata.ledger_id}", current.version, expected_version)
        stored = attrs.evolve(metadata, version=expected_version + 1)
        self._state.ledgers[metadata.ledger_id] = stored
        self._index(metadata.ledger_id, current.bookies(), stored.bookies())
        self._state.notify()
        return stored

    async def delete_ledger(self, ledger_id: int) -> None:
        await anyio.lowlevel.checkpoint()
        gone = self._state.ledgers.pop(ledger_id, None)
        if gone is None:
            raise NoSuchLedgerError(ledger_id)
        self._index(ledger_id, gone.bookies(), set())
        self._state.notify()

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        await anyio.lowlevel.checkpoint()
        return _page(self._state.ledgers, start, limit)

    async def ledgers_of_bookie(self, bookie_id: str, *, start: int = 0, limit: int | None = None) -> list[int]:
        await anyio.lowlevel.checkpoint()
        return _page(self._state.by_bookie.get(bookie_id, ()), start, limit)

    async def watch_ledger(self, ledger_id: int) -> AsyncIterator[LedgerMetadata | None]:
        last: object = object()
        while True:
            changed = self._state.changed
            current = self._state.ledgers.get(ledger_id)
            if current != last:
                last = current
                yield current
                if current is None:
                    return
            await changed.wait()

    async def register_bookie(
        self, info: BookieInfo, ttl_s: float, nursery: Spawner, *, replace: BookieInfo | None = None
    ) -> MemoryRegistration:
        await anyio.lowlevel.checkpoint()
        held = self._state.bookies.get(info.bookie_id)
        if held is not None and not held.same_bookie(info) and held != replace:
            raise id_in_use(held, info)
        self._state.bookies[info.bookie_id] = info
        return MemoryRegistration(self, info)

    def expire(self, bookie_id: str) -> None:
        """Drop a registration as if its holder had died."""
        self._state.bookies.pop(bookie_id, None)

    async def list_bookies(self, *, writable_only: bool = False) -> list[BookieInfo]:
        await anyio.lowlevel.checkpoint()
        state = self._state
        return sorted(
            (b for b in state.bookies.values() if not (writable_only and (b.read_only or b.bookie_id in state.decommissioned))),
            key=lambda b: b.bookie_id,
        )

    async def read_cookie(self, bookie_id: str) -> Versioned | None:
        await anyio.lowlevel.checkpoint()
        return self._state.cookies.get(bookie_id)

    async def write_cookie(self, bookie_id: str, value: bytes, expected_version: int | None) -> int:
        await anyio.lowlevel.checkpoint()
        current = self._state.cookies.get(bookie_id)
        _check_version(f"cookie of {bookie_id}", None if current is None else current.version, expected_version)
        version = 1 if current is None else current.version + 1
        self._state.cookies[bookie_id] = Versioned(value, version)
        return version

    # -- named logs ----------------------------------------------------------------------

    async def create_log(self, name: str, value: bytes) -> int:
        await anyio.lowlevel.checkpoint()
        if name in self._state.logs:
            raise LogExistsError(name)
        self._state.logs[name] = Versioned(value, 1)
        return 1

    async def read_log(self, name: str) -> Versioned:
        await anyio.lowlevel.checkpoint()
        return _held(self._state.logs, name, NoSuchLogError)

    async def update_log(self, name: str, value: bytes, expected_version: int) -> int:
        await anyio.lowlevel.checkpoint()
        _check_version(f"log {name!r}", _held(self._state.logs, name, NoSuchLogError).version, expected_version)
        self._state.logs[name] = Versioned(value, expected_version + 1)
        return expected_version + 1

    async def update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        """Every record checked, then every one written, with no checkpoint in between."""
        checked = check_log_changes(changes)
        await anyio.lowlevel.checkpoint()
        for name, _, expected_version in checked:
            _check_version(f"log {name!r}", _held(self._state.logs, name, NoSuchLogError).version, expected_version)
        for name, value, expected_version in checked:
            self._state.logs[name] = Versioned(value, expected_version + 1)
        return [expected_version + 1 for _, _, expected_version in checked]

    async def delete_log(self, name: str, expected_version: int | None = None) -> None:
        await anyio.lowlevel.checkpoint()
        current = _held(self._state.logs, name, NoSuchLogError)
        if expected_version is not None:
            _check_version(f"log {name!r}", current.version, expected_version)
        del self._state.logs[name]
        self._state.cursors.pop(name, None)

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        names = sorted(n for n in self._state.logs if n >= start)
        return names if limit is None else names[: max(limit, 0)]

    async def count_logs(self) -> int:
        await anyio.lowlevel.checkpoint()
        return len(self._state.logs)

    async def read_cursor(self, log: str, cursor: str) -> Versioned | None:
        await anyio.lowlevel.checkpoint()
        return self._state.cursors.get(log, {}).get(cursor)

    async def write_cursor(self, log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
        await anyio.lowlevel.checkpoint()
        if log not in self._state.logs:
            raise NoSuchLogError(log)
        cursors = self._state.cursors.setdefault(log, {})
        current = cursors.get(cursor)
        _check_version(f"cursor {cursor!r} of log {log!r}", None if current is None else current.version, expected_version)
        version = 1 if current is None else current.version + 1
        cursors[cursor] = Versioned(value, version)
        return version

    async def delete_cursor(self, log: str, cursor: str) -> bool:
        await anyio.lowlevel.checkpoint()
        return self._state.cursors.get(log, {}).pop(cursor, None) is not None

    async def list_cursors(self, log: str) -> dict[str, Versioned]:
        await anyio.lowlevel.checkpoint()
        return dict(sorted(self._state.cursors.get(log, {}).items()))

    # -- autorecovery -------------------------------------------------------------------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: Spawner) -> MemoryLock | None:
        """Nothing to keep alive in one process: the lock lives until released or expired."""
        await anyio.lowlevel.checkpoint()
        if name in self._state.locks:
            return None
        lock = MemoryLock(self._state, name, holder)
        self._state.locks[name] = lock
        return lock

    def expire_lock(self, name: str) -> None:
        """Drop a lock as if its holder had died; the holder's ``lost`` is set."""
        lock = self._state.locks.pop(name, None)
        if lock is not None:
            lock.lost.set()

    async def lock_holder(self, name: str) -> str | None:
        await anyio.lowlevel.checkpoint()
        lock = self._state.locks.get(name)
        return None if lock is None else lock.holder

    async def mark_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        await self.mark_many_under_replicated([ledger_id], bookies)

    async def mark_many_under_replicated(self, ledger_ids: Collection[int], bookies: Collection[str]) -> int:
        await anyio.lowlevel.checkpoint()
        marks, adding, now = self._state.under_replicated, frozenset(bookies), time.time()
        changed = 0
        for ledger_id in set(ledger_ids):
            current = marks.get(ledger_id)
            if current is None:
                marks[ledger_id] = UnderReplicated(ledger_id, adding, now)
            elif not adding <= current.bookies:
                marks[ledger_id] = attrs.evolve(current, bookies=current.bookies | adding)
            else:
                continue
            changed += 1
        return changed

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        await anyio.lowlevel.checkpoint()
        marks = self._state.under_replicated
        return [marks[i] for i in _page(marks, start, limit)]

    async def count_under_replicated(self) -> int:
        await anyio.lowlevel.checkpoint()
        return len(self._state.under_replicated)

    async def clear_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        await anyio.lowlevel.checkpoint()
        marks = self._state.under_replicated
        current = marks.get(ledger_id)
        if current is None:
            return
        left = current.bookies - frozenset(bookies)
        if left:
            marks[ledger_id] = attrs.evolve(current, bookies=left)
        else:
            del marks[ledger_id]

    async def set_decommissioned(self, bookie_id: str, decommissioned: bool) -> None:
        await anyio.lowlevel.checkpoint()
        if decommissioned:
            self._state.decommissioned.add(bookie_id)
        else:
            self._state.decommissioned.discard(bookie_id)

    async def list_decommissioned(self) -> set[str]:
        await anyio.lowlevel.checkpoint()
        return set(self._state.decommissioned)

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()


def open_store(uri: str, *, create: bool) -> MemoryMetadataStore:
    """``create`` makes no difference: a named store exists in its process once named."""
    return MemoryMetadataStore(uri)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store("memory", open_store, description="memory://NAME: in-process, for tests")
