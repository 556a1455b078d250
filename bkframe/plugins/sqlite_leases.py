"""The sqlite store's leases -- bookie registrations and locks -- timed by the machine's
monotonic clock, never by the wall clock.

A lease is a row with an expiry. Had the expiry been wall-clock time, a clock step would
move every lease: set an hour back (NTP, ``date -s``), a bookie's fresh registration would
look an hour expired to every other process (it vanishes from ``list_bookies``, an auditor
calls it lost) and an hour forward would keep a dead bookie's row alive for an hour. The
processes sharing a sqlite store share one machine, hence one ``CLOCK_MONOTONIC``, which
no step moves; it restarts at boot, so a row also names the boot it was written in
(``/proc/sys/kernel/random/boot_id``) and a row of another boot is expired -- its holder
died with that boot. The wall-clock expiry (``expires_at``) is still written, for a bkframe
from before this change reading the same file, and is what a row written by such a
bkframe (no ``boot``) is judged by. Without a boot id (not Linux) rows are timed by the
wall clock as before.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import attrs

from bkframe.core.metadata import BookieInfo

log = logging.getLogger("bkframe.metadata.sqlite")

T = TypeVar("T")

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

#: Columns added to the lease tables of a store made before them (``boot`` NULL: old row).
LEASE_COLUMNS = ("boot TEXT", "expires_mono REAL")
LEASE_TABLES = ("bookies", "locks")

#: A live lease row, with the parameters of :func:`now_params`; never NULL (``NOT LIVE``
#: must hold for every row that is not live).
LIVE = "(CASE WHEN boot IS NULL THEN expires_at > :wall ELSE IFNULL(boot = :boot, 0) AND expires_mono > :mono END)"


@functools.cache
def boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def now_params() -> dict[str, Any]:
    """The parameters of :data:`LIVE`: this boot, and the monotonic and wall clocks now."""
    return {"boot": boot_id(), "mono": time.monotonic(), "wall": time.time()}


def expiry_params(ttl_s: float) -> dict[str, Any]:
    """``boot``, ``expires_mono`` and ``expires_at`` of a lease that ends ``ttl_s`` from now."""
    return {"boot": boot_id(), "expires_mono": time.monotonic() + ttl_s, "expires_at": time.time() + ttl_s}


def add_lease_columns(db: sqlite3.Connection) -> None:
    """Give a store made before the monotonic leases their columns (idempotent)."""
    for table in LEASE_TABLES:
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column in LEASE_COLUMNS:
            if column.split()[0] not in have:
                try:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
                except sqlite3.OperationalError as e:
                    if "duplicate column" not in str(e):  # another process added it first
                        raise


def next_renewal_in(started: float, ttl_s: float) -> float:
    """Seconds until the next renewal of a lease whose last renewal started at ``started``.

    Renewals start every third of the TTL from the start of the last one, not its end: one
    that took long (a write lock held behind a slow disk) is followed by the next at once
    rather than a third of a TTL later, when the row may have expired."""
    return max(0.0, started + ttl_s / 3 - time.monotonic())


class _Store(Protocol):
    async def _call(self, fn: Any, *, lease: bool = False) -> Any: ...

    async def _transaction(self, fn: Any, *, lease: bool = False) -> Any: ...

    async def _upsert_bookie(
        self, info: BookieInfo, ttl_s: float, replace: BookieInfo | None = None, *, lease: bool = False
    ) -> None: ...


class SqliteRegistration:
    """Keeps a bookie's row alive until closed; the heartbeat runs in the holder's nursery."""

    def __init__(self, store: _Store, info: BookieInfo, ttl_s: float) -> None:
        self._store = store
        self.info = info
        self._ttl = ttl_s
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()

    async def _heartbeat(self) -> None:
        renewed = started = time.monotonic()
        try:
            with self._scope:
                while True:
                    await anyio.sleep(next_renewal_in(started, self._ttl))
                    started = time.monotonic()
                    try:
                        await self._store._upsert_bookie(self.info, self._ttl, lease=True)
                    except Exception as e:  # noqa: BLE001 - never fatal: a lost heartbeat only expires the row
                        # Keep trying: the row comes back as soon as the store answers again.
                        log.warning("bookie %s: registration heartbeat failed: %s", self.info.bookie_id, e)
                        continue
                    now = time.monotonic()
                    if now - renewed > self._ttl:
                        # The row was gone for a while: others saw no bookie (an auditor may
                        # have started its grace). Say so, or the gap is invisible.
                        log.warning(
                            "bookie %s: registration renewed %.1f s after the last one (TTL %.1f s): it "
                            "expired in between (the store or this process was too slow)",
                            self.info.bookie_id,
                            now - renewed,
                            self._ttl,
                        )
                    renewed = now
        finally:
            self._stopped.set()

    async def set_read_only(self, read_only: bool) -> None:
        self.info = attrs.evolve(self.info, read_only=read_only)
        await self._store._upsert_bookie(self.info, self._ttl)

    async def aclose(self) -> None:
        self._scope.cancel()
        await self._stopped.wait()

        def delete_ours(db: sqlite3.Connection) -> None:
            # Only our own row: after an expiry the id may be another bookie's.
            row = db.execute("SELECT data FROM bookies WHERE id = ?", (self.info.bookie_id,)).fetchone()
            if row is not None and BookieInfo.deserialize(row[0]).same_bookie(self.info):
                db.execute("DELETE FROM bookies WHERE id = ?", (self.info.bookie_id,))

        await self._store._transaction(delete_ours)


class SqliteLock:
    """A held lock row; the heartbeat (in the holder's nursery) pushes its expiry forward and
    sets ``lost`` if the row is no longer ours or could not be renewed for a whole TTL."""

    def __init__(self, store: _Store, name: str, holder: str, token: str, ttl_s: float) -> None:
        self._store = store
        self.name = name
        self.holder = holder
        self._token = token
        self._ttl = ttl_s
        self.lost = anyio.Event()
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()

    async def _heartbeat(self) -> None:
        renewed = started = time.monotonic()
        try:
            with self._scope:
                while True:
                    await anyio.sleep(next_renewal_in(started, self._ttl))
                    started = time.monotonic()
                    try:
                        ours = await self._store._call(self._renew, lease=True)
                    except Exception as e:  # noqa: BLE001 - retried until the TTL is over
                        log.warning("lock %s: heartbeat failed: %s", self.name, e)
                        if time.monotonic() - renewed < self._ttl:
                            continue
                        ours = False  # others may take it by now
                    if not ours:
                        log.warning("lock %s of %s expired while held", self.name, self.holder)
                        self.lost.set()
                        return
                    renewed = time.monotonic()
        finally:
            self._stopped.set()

    def _renew(self, db: sqlite3.Connection) -> bool:
        cur = db.execute(
            "UPDATE locks SET boot = :boot, expires_mono = :expires_mono, expires_at = :expires_at "
            f"WHERE name = :name AND token = :token AND {LIVE}",
            {**now_params(), **expiry_params(self._ttl), "name": self.name, "token": self._token},
        )
        return cur.rowcount == 1

    async def release(self) -> None:
        self._scope.cancel()
        await self._stopped.wait()
        # Only our own row: after an expiry the name may belong to someone else.
        await self._store._call(lambda db: db.execute("DELETE FROM locks WHERE name = ? AND token = ?", (self.name, self._token)))
