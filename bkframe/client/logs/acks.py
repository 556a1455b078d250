"""Cursor acknowledgements, kept in memory and stored at most once per cursor per interval.

Storing every ack costs a read and a compare-and-set of the cursor's record: a few hundred
acks a second per consumer, all of them metadata-store writes. Pulsar rate-limits the
persistence of its cursors' mark-delete position for the same reason; here an ack moves the
cursor in memory and a background flush stores the newest acknowledged position at most
once per ``cursor_flush_interval_s`` (a client setting; 0 stores every ack at once, as
before). :meth:`CursorAcks.flush` stores what is pending now; the client flushes when it
closes.

A crash loses the acks since the last flush: the consumer resumes at the stored position
and those entries are delivered again (at least once, as before). Flushes stay
compare-and-sets: the first try is one CAS on the version this client last saw; if the
record moved, it is read again and

- a position at or past ours (another consumer of the cursor acked further): nothing to write;
- a position before the one this client last saw (someone rewound the cursor, or deleted
  and made it again): the rewind wins, the acks not yet stored are dropped (logged);
- else (another consumer acked less far): ours is stored, with a CAS on the new version.
"""

from __future__ import annotations

import logging
import time

import anyio
import attrs

from bkframe.client.logs.model import Cursor, Position
from bkframe.client.logs.records import LogRecords
from bkframe.errors import BadVersionError, BKError, NoSuchCursorError, NoSuchLogError

log = logging.getLogger("bkframe.logs")


@attrs.define(eq=False)
class _Acked:
    """One cursor's acknowledgements on this client."""

    #: The cursor's record as this client last read or stored it.
    stored: Cursor
    #: Where reading resumes by the acks so far (ahead of ``stored`` while a flush is due).
    position: Position
    #: ``anyio.current_time()`` before which no flush writes (one write per interval).
    due: float = 0.0
    #: A background flush is scheduled.
    scheduled: bool = False
    lock: anyio.Lock = attrs.Factory(anyio.Lock)

    @property
    def dirty(self) -> bool:
        return self.position > self.stored.position


class CursorAcks:
    """The acks of every cursor one client moves (shared by the client's :class:`Logs`)."""

    def __init__(self, records: LogRecords, interval_s: float, nursery: anyio.abc.TaskGroup) -> None:
        self._records = records
        self._store = records.store
        self.interval_s = interval_s
        self._nursery = nursery
        self._acked: dict[tuple[str, str], _Acked] = {}

    async def ack(self, name: str, cursor: str, target: Position) -> Cursor:
        """Move the cursor to ``target`` (never back); stored within the interval. Returns
        the cursor as acknowledged (its ``version`` is the last stored one)."""
        if self.interval_s <= 0:
            return await self.set(name, cursor, target)
        key = (name, cursor)
        acked = self._acked.get(key)
        if acked is None:
            stored = await self._records.cursor(name, cursor)  # a missing cursor fails here, as before
            acked = self._acked.setdefault(key, _Acked(stored, stored.position))
        if target > acked.position:
            acked.position = target
            if not acked.scheduled:
                acked.scheduled = True
                self._nursery.start_soon(self._flush_later, key, acked)
        return attrs.evolve(acked.stored, position=acked.position)

    async def set(self, name: str, cursor: str, target: Position, *, rewind: bool = False) -> Cursor:
        """Store the cursor at ``target`` now (what :meth:`Logs.move_cursor` does); acks not
        stored yet that are further go with it, unless ``rewind``."""
        acked = self._acked.get((name, cursor))
        if acked is None:
            return await self._records.set_cursor(name, cursor, target, rewind=rewind)
        async with acked.lock:
            if not rewind:
                target = max(target, acked.position)
            stored = await self._records.set_cursor(name, cursor, target, rewind=rewind)
            acked.stored, acked.position = stored, stored.position
            return stored

    def forget(self, name: str, cursor: str | None = None) -> None:
        """Drop the acks of a deleted cursor (every cursor of a deleted log with None)."""
        for key in [k for k in self._acked if k[0] == name and cursor in (None, k[1])]:
            del self._acked[key]

    async def flush(self, name: str | None = None, cursor: str | None = None) -> None:
        """Store every ack not stored yet (of one log, or one cursor), now; raises what failed."""
        failures: list[BKError] = []
        for (log_name, cursor_name), acked in list(self._acked.items()):
            if name in (None, log_name) and cursor in (None, cursor_name) and acked.dirty:
                try:
                    await self._write(log_name, cursor_name, acked)
                except BKError as e:
                    failures.append(e)
        if failures:
            raise failures[0]

    async def _flush_later(self, key: tuple[str, str], acked: _Acked) -> None:
        name, cursor = key
        try:
            while acked.dirty and self._acked.get(key) is acked:
                await anyio.sleep_until(acked.due)
                try:
                    await self._write(name, cursor, acked)
                except (NoSuchCursorError, NoSuchLogError) as e:
                    log.warning("log %r: cursor %r is gone; its acks since the last flush are dropped: %s", name, cursor, e)
                    self.forget(name, cursor)
                except BKError as e:
                    log.warning("log %r: storing cursor %r failed (retried in %.3g s): %s", name, cursor, self.interval_s, e)
                    acked.due = anyio.current_time() + self.interval_s
        finally:
            acked.scheduled = False

    async def _write(self, name: str, cursor: str, acked: _Acked) -> None:
        async with acked.lock:
            current = acked.stored
            while acked.dirty:
                new = attrs.evolve(current, position=acked.position, updated_at=time.time())
                try:
                    version = await self._store.write_cursor(name, cursor, new.serialize(), current.version)
                    acked.stored = attrs.evolve(new, version=version)
                    break
                except BadVersionError:
                    pass
                # Someone else wrote the cursor since this client last saw it.
                latest = await self._records.cursor(name, cursor)
                if latest.log_uid != acked.stored.log_uid or latest.position < acked.stored.position:
                    log.warning(
                        "log %r: cursor %r was moved back to %s (or made again) by another client; acks up to %s "
                        "that were not stored yet are dropped",
                        name,
                        cursor,
                        latest.position,
                        acked.position,
                    )
                    acked.stored, acked.position = latest, latest.position
                    break
                acked.stored = current = latest
                acked.position = max(acked.position, latest.position)
            acked.due = anyio.current_time() + self.interval_s
