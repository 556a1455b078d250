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

from bkframe.core.heartbeat import Heartbeat
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


class _Lease:
    """What a registration and a lock share: their row is renewed from the holder's nursery
    (:meth:`_heartbeat`) every third of the TTL, timed from the start of the last renewal
    (:func:`next_renewal_in`), and each renewal says whether the row is still held."""

    def __init__(self, store: _Store, ttl_s: float) -> None:
        self._store = store
        self._ttl = ttl_s
        self._heartbeats = Heartbeat()
        #: When the last renewal started and when one last got through (set as the heartbeat starts).
        self._started = self._renewed = 0.0

    async def _heartbeat(self) -> None:
        self._renewed = self._started = time.monotonic()
        await self._heartbeats.run(lambda: next_renewal_in(self._started, self._ttl), self._beat)

    async def _beat(self) -> bool:
        self._started = time.monotonic()
        return await self._renew_lease()

    async def _renew_lease(self) -> bool:
        """One renewal; False once the row is no longer held (the heartbeat stops)."""
        raise NotImplementedError


class SqliteRegistration(_Lease):
    """Keeps a bookie's row alive until closed; the heartbeat runs in the holder's nursery."""

    def __init__(self, store: _Store, info: BookieInfo, ttl_s: float) -> None:
        super().__init__(store, ttl_s)
        self.info = info

    async def _renew_lease(self) -> bool:
        try:
            await self._store._upsert_bookie(self.info, self._ttl, lease=True)
        except Exception as e:  # noqa: BLE001 - never fatal: a lost heartbeat only expires the row
            # Keep trying: the row comes back as soon as the store answers again.
            log.warning("bookie %s: registration heartbeat failed: %s", self.info.bookie_id, e)
            return True
        now = time.monotonic()
        if now - self._renewed > self._ttl:
            # The row was gone for a while: others saw no bookie (an auditor may have
            # started its grace). Say so, or the gap is invisible.
            log.warning(
                "bookie %s: registration renewed %.1f s after the last one (TTL %.1f s): it "
                "expired in between (the store or this process was too slow)",
                self.info.bookie_id,
                now - self._renewed,
                self._ttl,
            )
        self._renewed = now
        return True

    async def set_read_only(self, read_only: bool) -> None:
        self.info = attrs.evolve(self.info, read_only=read_only)
        await self._store._upsert_bookie(self.info, self._ttl)

    async def aclose(self) -> None:
        await self._heartbeats.stop()

        def delete_ours(db: sqlite3.Connection) -> None:
            # Only our own row: after an expiry the id may be another bookie's.
            row = db.execute("SELECT data FROM bookies WHERE id = ?", (self.info.bookie_id,)).fetchone()
            if row is not None and BookieInfo.deserialize(row[0]).same_bookie(self.info):
                db.execute("DELETE FROM bookies WHERE id = ?", (self.info.bookie_id,))

        await self._store._transaction(delete_ours)


class SqliteLock(_Lease):
    """A held lock row; the heartbeat (in the holder's nursery) pushes its expiry forward and
    sets ``lost`` if the row is no longer ours or could not be renewed for a whole TTL."""

    def __init__(self, store: _Store, name: str, holder: str, token: str, ttl_s: float) -> None:
        super().__init__(store, ttl_s)
        self.name = name
        self.holder = holder
        self._token = token
        self.lost = anyio.Event()

    async def _renew_lease(self) -> bool:
        try:
            ours = await self._store._call(self._push_expiry, lease=True)
        except Exception as e:  # noqa: BLE001 - retried until the TTL is over
            log.warning("lock %s: heartbeat failed: %s", self.name, e)
            if time.monotonic() - self._renewed < self._ttl:
                return True
            ours = False  # others may take it by now
        if not ours:
            log.warning("lock %s of %s expired while held", self.name, self.holder)
            self.lost.set()
            return False
        self._renewed = time.monotonic()
        return True

    def _push_expiry(self, db: sqlite3.Connection) -> bool:
        cur = db.execute(
            "UPDATE locks SET boot = :boot, expires_mono = :expires_mono, expires_at = :expires_at "
            f"WHERE name = :name AND token = :token AND {LIVE}",
            {**now_params(), **expiry_params(self._ttl), "name": self.name, "token": self._token},
        )
        return cur.rowcount == 1

    async def release(self) -> None:
        await self._heartbeats.stop()
        # Only our own row: after an expiry the name may belong to someone else.
        await self._store._call(lambda db: db.execute("DELETE FROM locks WHERE name = ? AND token = ?", (self.name, self._token)))
