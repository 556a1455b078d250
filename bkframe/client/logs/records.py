"""A log's records in the metadata store: the log record (read, compare-and-set, update with
retries), its cursors, and the ledgers it lists as garbage.

:class:`~bkframe.client.logs.api.Logs`, the writer and the reader all go through one
:class:`LogRecords`, so none of them reaches into another for these steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import attrs

from bkframe.client.logs import chunks
from bkframe.client.logs.ledgers import LedgerClient
from bkframe.client.logs.model import Chunk, Cursor, LogMetadata, Position, Segment
from bkframe.core.interfaces.metadata_store import MultiLogStore
from bkframe.core.ledger_keys import password_hash
from bkframe.errors import (
    BadVersionError,
    BKError,
    NoSuchCursorError,
    NoSuchLedgerError,
    NoSuchLogError,
    SubscriptionError,
    UnauthorizedError,
    UnsupportedError,
)

log = logging.getLogger("bkframe.logs")

#: Chunk records a client keeps read (each ~70 bytes per segment).
CACHED_CHUNKS = 64


class LogRecords:
    """Log and cursor records of one client's metadata store, and deleting the ledgers a
    log let go."""

    def __init__(self, ledgers: LedgerClient) -> None:
        self.ledgers = ledgers
        self.store = ledgers.metadata
        #: Segments of chunk records read lately, by (log uid, chunk key).
        self._chunks: dict[tuple[str, int], list[Segment]] = {}

    # -- the log record -----------------------------------------------------------------

    async def read(self, name: str) -> LogMetadata:
        found = await self.store.read_log(name)
        return LogMetadata.deserialize(found.value, found.version)

    async def cas(self, record: LogMetadata, expected_version: int) -> LogMetadata:
        """Store ``record`` if the stored one is still at ``expected_version``
        (:class:`BadVersionError` if not); the record as stored. Its oldest closed segments
        move to chunk records first when it holds too many (:mod:`.chunks`)."""
        return (await self.cas_many([(record, expected_version, None)]))[0]

    async def cas_many(self, changes: Sequence[tuple[LogMetadata, int, int | None]]) -> list[LogMetadata]:
        """Store each ``(record, expected_version, spill_before)`` -- all of them if every
        stored record is still at its expected version, else none (:class:`BadVersionError`
        names the log): one ``update_log`` for one record, one ``update_logs`` of a
        :class:`~bkframe.core.interfaces.metadata_store.MultiLogStore` for several. Each record's chunk records
        are written first (:meth:`cas`); with ``spill_before``, only segments numbered below
        it move to chunks."""
        spilled: list[tuple[LogMetadata, int]] = []
        try:
            for record, expected_version, spill_before in changes:
                record, moved = chunks.spill(record, before=spill_before)
                for chunk, segments in moved:
                    try:
                        await self.store.write_cursor(
                            record.name, chunks.record_name(chunk.key), chunks.serialize(record.uid, segments), None
                        )
                    except BadVersionError:
                        pass  # written by an attempt whose CAS failed: the same closed segments
                spilled.append((record, expected_version))
            if len(spilled) == 1:
                record, expected_version = spilled[0]
                versions = [await self.store.update_log(record.name, record.serialize(), expected_version)]
            else:
                store = self.multi_log_store()
                versions = await store.update_logs([(r.name, r.serialize(), v) for r, v in spilled])
        except NoSuchLogError as e:
            raise NoSuchLogError(e.name, f"log {e.name!r} was deleted") from None
        return [attrs.evolve(record, version=version) for (record, _), version in zip(spilled, versions)]

    def multi_log_store(self) -> MultiLogStore:
        """The store, if it changes several log records in one step; else a clear error."""
        # Looked up, not isinstance(): Python 3.12 checks protocols without __getattr__,
        # which stores wrapped by a proxy (tests, benchmarks) answer through.
        if not callable(getattr(self.store, "update_logs", None)):
            raise UnsupportedError(
                f"the metadata store {self.store.uri} ({type(self.store).__name__}) cannot change several logs in one "
                f"step (it has no update_logs; docs/plugins.md): commit to one log at a time (commit_ledgers), or use "
                f"a store that can (memory, sqlite, zk, etcd)"
            )
        return cast(MultiLogStore, self.store)

    async def chunk(self, record: LogMetadata, chunk: Chunk) -> list[Segment]:
        """The segments of one chunk that are not trimmed (cached: a chunk record changes only
        when an offload is recorded on it, and a reader that misses that reads the bookies)."""
        key = (record.uid, chunk.key)
        found = self._chunks.get(key)
        if found is None:
            stored = await self.store.read_cursor(record.name, chunks.record_name(chunk.key))
            if stored is None:
                raise NoSuchLogError(record.name, f"log {record.name!r}: its chunk {chunk.key} is gone (log deleted?)")
            found = chunks.deserialize(record, attrs.evolve(chunk, first=chunk.key), stored.value)
            if len(self._chunks) >= CACHED_CHUNKS:
                del self._chunks[next(iter(self._chunks))]
            self._chunks[key] = found
        return [s for s in found if s.number >= chunk.first]

    def forget_chunks(self, uid: str) -> None:
        """Drop the cached chunk records of the log with uid ``uid`` (read them fresh next)."""
        for key in [k for k in self._chunks if k[0] == uid]:
            del self._chunks[key]

    async def segments(self, record: LogMetadata, start: int = 0) -> list[Segment]:
        """The log's segments numbered ``start`` or more: from the chunks they are in, then
        the record's own."""
        out: list[Segment] = []
        for c in record.chunks:
            if c.last >= start:
                out.extend(s for s in await self.chunk(record, c) if s.number >= start)
        out.extend(s for s in record.segments if s.number >= start)
        return out

    async def segment(self, record: LogMetadata, number: int) -> Segment | None:
        for c in record.chunks:
            if c.first <= number <= c.last:
                return next((s for s in await self.chunk(record, c) if s.number == number), None)
        return record.segment(number)

    async def update(self, name: str, change: Callable[[LogMetadata], LogMetadata]) -> LogMetadata:
        """CAS ``change(record)`` into the record, re-reading and retrying when it moved
        (``change`` returning its argument itself means: nothing to do)."""
        while True:
            record = await self.read(name)
            new = change(record)
            if new is record:
                return record
            try:
                return await self.cas(new, record.version)
            except BadVersionError:
                continue

    @staticmethod
    def check_password(record: LogMetadata, password: bytes) -> None:
        if record.password_hash != password_hash(password):
            raise UnauthorizedError(f"wrong password for log {record.name!r}")

    # -- ledgers the log let go -----------------------------------------------------------

    async def delete_ledger_quietly(self, ledger_id: int) -> bool:
        """Delete a ledger the log no longer needs; False (logged) if that failed."""
        try:
            await self.ledgers.delete_ledger(ledger_id)
        except NoSuchLedgerError:
            pass
        except Exception as e:  # noqa: BLE001 - the ledger stays listed as garbage; a later pass retries
            log.warning("could not delete ledger %d: %s", ledger_id, e)
            return False
        return True

    async def collect_garbage(self, name: str) -> LogMetadata:
        """Delete the ledgers the record lists as garbage, then drop them from it."""
        record = await self.read(name)
        deleted = [i for i in record.garbage if await self.delete_ledger_quietly(i)]
        if deleted:
            record = await self.update(name, lambda r: r.without_garbage(deleted) if set(deleted) & set(r.garbage) else r)
        return record

    # -- cursors ---------------------------------------------------------------------------

    async def cursor(self, name: str, cursor: str) -> Cursor:
        found = await self.store.read_cursor(name, cursor)
        if found is None:
            raise NoSuchCursorError(f"log {name!r} has no cursor {cursor!r}")
        return Cursor.deserialize(name, cursor, found.value, found.version)

    async def cursors(self, name: str) -> list[Cursor]:
        found = await self.store.list_cursors(name)
        return [Cursor.deserialize(name, c, v.value, v.version) for c, v in found.items() if not chunks.is_chunk(c)]

    async def delete_chunks(self, name: str, gone: Iterable[Chunk]) -> None:
        """Delete the records of chunks a trim removed (a failure leaves them to the log's delete)."""
        for c in gone:
            try:
                await self.store.delete_cursor(name, chunks.record_name(c.key))
            except BKError as e:
                log.warning("log %r: deleting chunk record %d failed (deleted with the log): %s", name, c.key, e)

    async def set_cursor(
        self, name: str, cursor: str, target: Position, *, rewind: bool = False, touch: bool = True
    ) -> Cursor:
        """Move the cursor to ``target``; never back (an older position is ignored) unless
        ``rewind``. ``touch``: the move is its consumer's (it resets the inactivity clock);
        a trim moving an idle cursor on is not."""
        while True:
            current = await self.cursor(name, cursor)
            if current.subscription and touch:
                raise SubscriptionError(
                    f"{cursor!r} of log {name!r} is a subscription, not a cursor: its consumers ack its records "
                    f"(docs/subscriptions.md)"
                )
            if target == current.position or (target < current.position and not rewind):
                return current
            new = attrs.evolve(current, position=target, updated_at=time.time() if touch else current.updated_at)
            try:
                version = await self.store.write_cursor(name, cursor, new.serialize(), current.version)
                return attrs.evolve(new, version=version)
            except BadVersionError:
                continue
