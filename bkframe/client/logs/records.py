"""A log's records in the metadata store: the log record (read, compare-and-set, update with
retries), its cursors, and the ledgers it lists as garbage.

:class:`~bkframe.client.logs.api.Logs`, the writer and the reader all go through one
:class:`LogRecords`, so none of them reaches into another for these steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

from bkframe.client.logs.ledgers import LedgerClient
from bkframe.client.logs.model import Cursor, LogMetadata, Position
from bkframe.core.metadata import password_hash
from bkframe.errors import BadVersionError, NoSuchCursorError, NoSuchLedgerError, NoSuchLogError, UnauthorizedError

log = logging.getLogger("bkframe.logs")


class LogRecords:
    """Log and cursor records of one client's metadata store, and deleting the ledgers a
    log let go."""

    def __init__(self, ledgers: LedgerClient) -> None:
        self.ledgers = ledgers
        self.store = ledgers.metadata

    # -- the log record -----------------------------------------------------------------

    async def read(self, name: str) -> LogMetadata:
        found = await self.store.read_log(name)
        return LogMetadata.deserialize(found.value, found.version)

    async def cas(self, record: LogMetadata, expected_version: int) -> LogMetadata:
        """Store ``record`` if the stored one is still at ``expected_version``
        (:class:`BadVersionError` if not); the record as stored."""
        try:
            version = await self.store.update_log(record.name, record.serialize(), expected_version)
        except NoSuchLogError:
            raise NoSuchLogError(record.name, f"log {record.name!r} was deleted") from None
        return attrs.evolve(record, version=version)

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
        return [Cursor.deserialize(name, c, v.value, v.version) for c, v in found.items()]

    async def set_cursor(self, name: str, cursor: str, target: Position, *, rewind: bool = False) -> Cursor:
        """Move the cursor to ``target``; never back (an older position is ignored) unless
        ``rewind``."""
        while True:
            current = await self.cursor(name, cursor)
            if target == current.position or (target < current.position and not rewind):
                return current
            new = attrs.evolve(current, position=target, updated_at=time.time())
            try:
                version = await self.store.write_cursor(name, cursor, new.serialize(), current.version)
                return attrs.evolve(new, version=version)
            except BadVersionError:
                continue
