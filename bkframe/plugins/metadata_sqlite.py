"""``sqlite://PATH``: the embedded metadata store; processes on one machine share it safely.

SQLite in WAL mode with a busy timeout serialises writers across processes; every
compare-and-set is one ``UPDATE ... WHERE version = ?``. All calls run in a worker thread
(``anyio.to_thread.run_sync`` with the store's own limiter of 1), so the event loop never
blocks on the database. A bookie registration is a row with an expiry time that a
heartbeat task pushes forward; a dead bookie stops heartbeating and its row expires. A lock
is the same: a row with its holder, a token of its own and an expiry, free to take once
expired. Expiries are on the machine's monotonic clock (:mod:`.sqlite_leases`), so a step
of the wall clock moves none.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio

from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.metadata_store import LogChange, check_log_changes
from bkframe.core.metadata import BookieInfo, ClusterRecord, LedgerMetadata, UnderReplicated, Versioned, id_in_use
from bkframe.core.registry import ComponentRegistry
from bkframe.errors import BadVersionError, LedgerExistsError, LogExistsError, MetadataError, NoSuchLedgerError, NoSuchLogError
from bkframe.plugins.sqlite_leases import LIVE, SqliteLock, SqliteRegistration, add_lease_columns, expiry_params, now_params

if TYPE_CHECKING:  # a type only: the value imports trio (bkframe.core.interfaces)
    from bkframe.core.interfaces import Spawner

log = logging.getLogger("bkframe.metadata.sqlite")

SCHEME = "sqlite://"
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledgers (id INTEGER PRIMARY KEY, data BLOB NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS id_counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bookies (
    id TEXT PRIMARY KEY, data BLOB NOT NULL, expires_at REAL NOT NULL, boot TEXT, expires_mono REAL
);
CREATE TABLE IF NOT EXISTS cookies (id TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL);
INSERT OR IGNORE INTO id_counter (name, value) VALUES ('ledger', 0);
CREATE TABLE IF NOT EXISTS logs (name TEXT PRIMARY KEY, data BLOB NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log_cursors (
    log TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (log, name)
);
CREATE TABLE IF NOT EXISTS locks (
    name TEXT PRIMARY KEY, holder TEXT NOT NULL, token TEXT NOT NULL, expires_at REAL NOT NULL, boot TEXT, expires_mono REAL
);
CREATE TABLE IF NOT EXISTS under_replicated (ledger_id INTEGER PRIMARY KEY, bookies TEXT NOT NULL, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS decommissioned (id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS cluster (id INTEGER PRIMARY KEY CHECK (id = 1), data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_bookies (bookie TEXT NOT NULL, ledger INTEGER NOT NULL, PRIMARY KEY (bookie, ledger))
    WITHOUT ROWID;
"""

#: How often watches look for a new version.
WATCH_POLL_S = 0.05


class SqliteMetadataStore:
    """``create=False`` (what clients pass) refuses a file that does not exist yet, so that a
    typo in a URI is an error rather than a new, empty cluster."""

    def __init__(self, uri: str, *, create: bool = True) -> None:
        self.uri = uri
        path = Path(uri[len(SCHEME) :])
        if not str(path):
            raise MetadataError(f"metadata URI {uri!r} names no file; use sqlite:///abs/path.db")
        if not create and not path.is_file():
            raise MetadataError(
                f"metadata store {uri!r} does not exist (no file {path}). Check the URI; a new cluster is made "
                f"with 'bkframe cluster init --metadata {uri}' (or by 'bkframe sandbox')"
            )
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA busy_timeout=30000")
            # Several processes opening a new store at once: switching it to WAL needs the
            # database to itself and SQLite answers "locked" at once (no busy wait) to the
            # others. They try again, briefly.
            deadline = time.monotonic() + 30
            while True:
                try:
                    self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute("PRAGMA synchronous=FULL")
                    self._db.executescript(SCHEMA)
                    add_lease_columns(self._db)
                    break
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except (OSError, sqlite3.Error) as e:
            raise MetadataError(f"cannot open metadata store {uri!r}: {e}") from None
        self._limiter = anyio.CapacityLimiter(1)
        # Lease renewals (heartbeats) have a connection and a thread of their own, opened on
        # the first: behind the store's other calls, one waited 14.1 s under load (slow
        # listings, fsyncs) and a registration with a TTL of 6 s expired meanwhile.
        self._path = path
        self._lease_db: sqlite3.Connection | None = None
        self._lease_limiter = anyio.CapacityLimiter(1)

    def _lease_connection(self) -> sqlite3.Connection:
        """The renewals' connection (in the lease limiter's thread)."""
        if self._lease_db is None:
            self._lease_db = sqlite3.connect(self._path, timeout=30, isolation_level=None, check_same_thread=False)
            self._lease_db.execute("PRAGMA busy_timeout=30000")
            # A renewal commits without an fsync (WAL's NORMAL keeps the file consistent;
            # a later commit's fsync carries it): a lease is void after a power cut anyway (a
            # new boot), and renewals waiting on a disk stalled by others' fsyncs (10.8 s apart under
            # the suite's load) let a live bookie's row expire, and an auditor found it lost.
            self._lease_db.execute("PRAGMA synchronous=NORMAL")
        return self._lease_db

    async def _call(self, fn: Callable[[sqlite3.Connection], T], *, lease: bool = False) -> T:
        """``lease``: a lease renewal, on the renewals' connection."""

        def run() -> T:
            try:
                return fn(self._lease_connection() if lease else self._db)
            except sqlite3.Error as e:
                raise MetadataError(f"metadata store {self.uri}: {e}") from None

        return await anyio.to_thread.run_sync(run, limiter=self._lease_limiter if lease else self._limiter)

    async def _transaction(self, fn: Callable[[sqlite3.Connection], T], *, lease: bool = False) -> T:
        """Run ``fn`` inside BEGIN IMMEDIATE ... COMMIT (a write lock across processes)."""

        def run(db: sqlite3.Connection) -> T:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        return await self._call(run, lease=lease)

    # -- the cluster record --------------------------------------------------------------

    async def init_cluster(self, record: ClusterRecord) -> bool:
        cur = await self._call(
            lambda db: db.execute("INSERT OR IGNORE INTO cluster (id, data) VALUES (1, ?)", (record.serialize(),))
        )
        return cur.rowcount == 1

    async def read_cluster(self) -> ClusterRecord | None:
        row = await self._call(lambda db: db.execute("SELECT data FROM cluster WHERE id = 1").fetchone())
        return None if row is None else ClusterRecord.deserialize(row[0])

    # -- ledgers -------------------------------------------------------------------------

    async def new_ledger_id(self) -> int:
        def take(db: sqlite3.Connection) -> int:
            db.execute("UPDATE id_counter SET value = value + 1 WHERE name = 'ledger'")
            return int(db.execute("SELECT value FROM id_counter WHERE name = 'ledger'").fetchone()[0])

        return await self._transaction(take)

    async def new_ledger_ids(self, count: int) -> range:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")

        def take(db: sqlite3.Connection) -> range:
            db.execute("UPDATE id_counter SET value = value + ? WHERE name = 'ledger'", (count,))
            last = int(db.execute("SELECT value FROM id_counter WHERE name = 'ledger'").fetchone()[0])
            return range(last - count + 1, last + 1)

        return await self._transaction(take)

    @staticmethod
    def _index(db: sqlite3.Connection, ledger_id: int, old: set[str], new: set[str]) -> None:
        db.executemany("DELETE FROM ledger_bookies WHERE bookie = ? AND ledger = ?", [(b, ledger_id) for b in old - new])
        db.executemany("INSERT OR IGNORE INTO ledger_bookies (bookie, ledger) VALUES (?, ?)", [(b, ledger_id) for b in new - old])

    async def create_ledger(self, metadata: LedgerMetadata) -> LedgerMetadata:
        def insert(db: sqlite3.Connection) -> None:
            data = metadata.serialize()
            try:
                db.execute("INSERT INTO ledgers (id, data, version) VALUES (?, ?, 1)", (metadata.ledger_id, data))
            except sqlite3.IntegrityError:
                row = db.execute("SELECT data, version FROM ledgers WHERE id = ?", (metadata.ledger_id,)).fetchone()
                if row is not None and bytes(row[0]) == data and row[1] == 1:
                    return  # this very record: a create sent again
                raise LedgerExistsError(metadata.ledger_id) from None
            self._index(db, metadata.ledger_id, set(), metadata.bookies())

        await self._transaction(insert)
        return LedgerMetadata.deserialize(metadata.serialize(), 1)

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        row = await self._call(lambda db: db.execute("SELECT data, version FROM ledgers WHERE id = ?", (ledger_id,)).fetchone())
        if row is None:
            raise NoSuchLedgerError(ledger_id)
        return LedgerMetadata.deserialize(row[0], row[1])

    async def update_ledger(self, metadata: LedgerMetadata, expected_version: int) -> LedgerMetadata:
        data = metadata.serialize()

        def cas(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT data FROM ledgers WHERE id = ? AND version = ?", (metadata.ledger_id, expected_version)
            ).fetchone()
            cur = db.execute(
                "UPDATE ledgers SET data = ?, version = version + 1 WHERE id = ? AND version = ?",
                (data, metadata.ledger_id, expected_version),
            )
            if cur.rowcount == 1:
                self._index(
                    db, metadata.ledger_id, LedgerMetadata.deserialize(row[0], expected_version).bookies(), metadata.bookies()
                )
                return expected_version + 1
            row = db.execute("SELECT version FROM ledgers WHERE id = ?", (metadata.ledger_id,)).fetchone()
            if row is None:
                raise NoSuchLedgerError(metadata.ledger_id)
            raise BadVersionError(f"ledger {metadata.ledger_id} is at version {row[0]}, not {expected_version}")

        version = await self._transaction(cas)
        return LedgerMetadata.deserialize(data, version)

    async def delete_ledger(self, ledger_id: int) -> None:
        def delete(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT data, version FROM ledgers WHERE id = ?", (ledger_id,)).fetchone()
            if row is None:
                raise NoSuchLedgerError(ledger_id)
            db.execute("DELETE FROM ledgers WHERE id = ?", (ledger_id,))
            self._index(db, ledger_id, LedgerMetadata.deserialize(row[0], row[1]).bookies(), set())

        await self._transaction(delete)

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        rows = await self._call(
            lambda db: db.execute(
                "SELECT id FROM ledgers WHERE id >= ? ORDER BY id LIMIT ?", (start, -1 if limit is None else limit)
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def ledgers_of_bookie(self, bookie_id: str, *, start: int = 0, limit: int | None = None) -> list[int]:
        rows = await self._call(
            lambda db: db.execute(
                "SELECT ledger FROM ledger_bookies WHERE bookie = ? AND ledger >= ? ORDER BY ledger LIMIT ?",
                (bookie_id, start, -1 if limit is None else limit),
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def watch_ledger(self, ledger_id: int) -> AsyncIterator[LedgerMetadata | None]:
        last_version: int | None = -1
        while True:
            row = await self._call(
                lambda db: db.execute("SELECT data, version FROM ledgers WHERE id = ?", (ledger_id,)).fetchone()
            )
            version = None if row is None else row[1]
            if version != last_version:
                last_version = version
                if row is None:
                    yield None
                    return
                yield LedgerMetadata.deserialize(row[0], row[1])
            await anyio.sleep(WATCH_POLL_S)

    # -- bookies -------------------------------------------------------------------------

    async def _upsert_bookie(
        self, info: BookieInfo, ttl_s: float, replace: BookieInfo | None = None, *, lease: bool = False
    ) -> None:
        """Write the registration unless another bookie's live one holds the id (one
        transaction: two bookies starting at once cannot both pass the check)."""

        def upsert(db: sqlite3.Connection) -> None:
            live = f"SELECT data FROM bookies WHERE id = :id AND {LIVE}"
            row = db.execute(live, {**now_params(), "id": info.bookie_id}).fetchone()
            if row is not None:
                held = BookieInfo.deserialize(row[0])
                if not held.same_bookie(info) and held != replace:
                    raise id_in_use(held, info)
            db.execute(
                "INSERT OR REPLACE INTO bookies (id, data, expires_at, boot, expires_mono) "
                "VALUES (:id, :data, :expires_at, :boot, :expires_mono)",
                {**expiry_params(ttl_s), "id": info.bookie_id, "data": info.serialize()},
            )

        await self._transaction(upsert, lease=lease)

    async def register_bookie(
        self, info: BookieInfo, ttl_s: float, nursery: Spawner, *, replace: BookieInfo | None = None
    ) -> SqliteRegistration:
        await self._upsert_bookie(info, ttl_s, replace)
        registration = SqliteRegistration(self, info, ttl_s)
        nursery.start_soon(registration._heartbeat, name=f"bkframe-heartbeat-{info.bookie_id}")
        return registration

    async def list_bookies(self, *, writable_only: bool = False) -> list[BookieInfo]:
        rows = await self._call(
            lambda db: db.execute(f"SELECT data FROM bookies WHERE {LIVE} ORDER BY id", now_params()).fetchall()
        )
        infos = [BookieInfo.deserialize(r[0]) for r in rows]
        if not writable_only:
            return infos
        decommissioned = await self.list_decommissioned()
        return [b for b in infos if not (b.read_only or b.bookie_id in decommissioned)]

    # -- cookies -------------------------------------------------------------------------

    async def read_cookie(self, bookie_id: str) -> Versioned | None:
        row = await self._call(lambda db: db.execute("SELECT value, version FROM cookies WHERE id = ?", (bookie_id,)).fetchone())
        return None if row is None else Versioned(bytes(row[0]), row[1])

    async def write_cookie(self, bookie_id: str, value: bytes, expected_version: int | None) -> int:
        def cas(db: sqlite3.Connection) -> int:
            if expected_version is None:
                try:
                    db.execute("INSERT INTO cookies (id, value, version) VALUES (?, ?, 1)", (bookie_id, value))
                except sqlite3.IntegrityError:
                    raise BadVersionError(f"cookie of {bookie_id} already exists") from None
                return 1
            cur = db.execute(
                "UPDATE cookies SET value = ?, version = version + 1 WHERE id = ? AND version = ?",
                (value, bookie_id, expected_version),
            )
            if cur.rowcount != 1:
                raise BadVersionError(f"cookie of {bookie_id} is not at version {expected_version}")
            return expected_version + 1

        return await self._transaction(cas)

    # -- named logs ----------------------------------------------------------------------

    async def create_log(self, name: str, value: bytes) -> int:
        def insert(db: sqlite3.Connection) -> None:
            try:
                db.execute("INSERT INTO logs (name, data, version) VALUES (?, ?, 1)", (name, value))
            except sqlite3.IntegrityError:
                raise LogExistsError(name) from None

        await self._call(insert)
        return 1

    async def read_log(self, name: str) -> Versioned:
        row = await self._call(lambda db: db.execute("SELECT data, version FROM logs WHERE name = ?", (name,)).fetchone())
        if row is None:
            raise NoSuchLogError(name)
        return Versioned(bytes(row[0]), row[1])

    @staticmethod
    def _cas_log(db: sqlite3.Connection, name: str, value: bytes, expected_version: int) -> int:
        cur = db.execute(
            "UPDATE logs SET data = ?, version = version + 1 WHERE name = ? AND version = ?", (value, name, expected_version)
        )
        if cur.rowcount == 1:
            return expected_version + 1
        row = db.execute("SELECT version FROM logs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NoSuchLogError(name)
        raise BadVersionError(f"log {name!r} is at version {row[0]}, not {expected_version}")

    async def update_log(self, name: str, value: bytes, expected_version: int) -> int:
        return await self._transaction(lambda db: self._cas_log(db, name, value, expected_version))

    async def update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        """One transaction: a change that fails rolls back those before it."""
        checked = check_log_changes(changes)
        return await self._transaction(lambda db: [self._cas_log(db, *change) for change in checked])

    async def delete_log(self, name: str, expected_version: int | None = None) -> None:
        def delete(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT version FROM logs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise NoSuchLogError(name)
            if expected_version is not None and row[0] != expected_version:
                raise BadVersionError(f"log {name!r} is at version {row[0]}, not {expected_version}")
            db.execute("DELETE FROM logs WHERE name = ?", (name,))
            db.execute("DELETE FROM log_cursors WHERE log = ?", (name,))

        await self._transaction(delete)

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        args = (start, -1 if limit is None else max(limit, 0))  # -1: no limit; a page is a primary-key range
        query = "SELECT name FROM logs WHERE name >= ? ORDER BY name LIMIT ?"
        return [r[0] for r in await self._call(lambda db: db.execute(query, args).fetchall())]

    async def count_logs(self) -> int:
        return int((await self._call(lambda db: db.execute("SELECT COUNT(*) FROM logs").fetchone()))[0])

    async def read_cursor(self, log: str, cursor: str) -> Versioned | None:
        row = await self._call(
            lambda db: db.execute("SELECT data, version FROM log_cursors WHERE log = ? AND name = ?", (log, cursor)).fetchone()
        )
        return None if row is None else Versioned(bytes(row[0]), row[1])

    async def write_cursor(self, log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
        def cas(db: sqlite3.Connection) -> int:
            if db.execute("SELECT 1 FROM logs WHERE name = ?", (log,)).fetchone() is None:
                raise NoSuchLogError(log)
            if expected_version is None:
                try:
                    db.execute("INSERT INTO log_cursors (log, name, data, version) VALUES (?, ?, ?, 1)", (log, cursor, value))
                except sqlite3.IntegrityError:
                    raise BadVersionError(f"cursor {cursor!r} of log {log!r} already exists") from None
                return 1
            cur = db.execute(
                "UPDATE log_cursors SET data = ?, version = version + 1 WHERE log = ? AND name = ? AND version = ?",
                (value, log, cursor, expected_version),
            )
            if cur.rowcount != 1:
                raise BadVersionError(f"cursor {cursor!r} of log {log!r} is not at version {expected_version}")
            return expected_version + 1

        return await self._transaction(cas)

    async def delete_cursor(self, log: str, cursor: str) -> bool:
        cur = await self._call(lambda db: db.execute("DELETE FROM log_cursors WHERE log = ? AND name = ?", (log, cursor)))
        return bool(cur.rowcount)

    async def list_cursors(self, log: str) -> dict[str, Versioned]:
        rows = await self._call(
            lambda db: db.execute("SELECT name, data, version FROM log_cursors WHERE log = ? ORDER BY name", (log,)).fetchall()
        )
        return {r[0]: Versioned(bytes(r[1]), r[2]) for r in rows}

    # -- autorecovery -------------------------------------------------------------------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: Spawner) -> SqliteLock | None:
        token = uuid.uuid4().hex

        def take(db: sqlite3.Connection) -> bool:
            db.execute(f"DELETE FROM locks WHERE name = :name AND NOT {LIVE}", {**now_params(), "name": name})
            cur = db.execute(
                "INSERT OR IGNORE INTO locks (name, holder, token, expires_at, boot, expires_mono) "
                "VALUES (:name, :holder, :token, :expires_at, :boot, :expires_mono)",
                {**expiry_params(ttl_s), "name": name, "holder": holder, "token": token},
            )
            return cur.rowcount == 1

        if not await self._transaction(take):
            return None
        lock = SqliteLock(self, name, holder, token, ttl_s)
        nursery.start_soon(lock._heartbeat, name=f"bkframe-lock-{name}")
        return lock

    async def lock_holder(self, name: str) -> str | None:
        row = await self._call(
            lambda db: db.execute(
                f"SELECT holder FROM locks WHERE name = :name AND {LIVE}", {**now_params(), "name": name}
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def mark_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        await self.mark_many_under_replicated([ledger_id], bookies)

    async def mark_many_under_replicated(self, ledger_ids: Collection[int], bookies: Collection[str]) -> int:
        """One transaction (one fsync) for the whole page, not one per ledger."""
        adding, ids = set(bookies), sorted(set(ledger_ids))

        def mark(db: sqlite3.Connection) -> int:
            now, changed = time.time(), 0
            for ledger_id in ids:
                row = db.execute("SELECT bookies FROM under_replicated WHERE ledger_id = ?", (ledger_id,)).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO under_replicated (ledger_id, bookies, since) VALUES (?, ?, ?)",
                        (ledger_id, json.dumps(sorted(adding)), now),
                    )
                elif not adding <= (current := set(json.loads(row[0]))):
                    merged = sorted(current | adding)
                    db.execute("UPDATE under_replicated SET bookies = ? WHERE ledger_id = ?", (json.dumps(merged), ledger_id))
                else:
                    continue
                changed += 1
            return changed

        return await self._transaction(mark) if ids else 0

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        if start >= 2**63:  # past sqlite's largest integer (a caller's cursor after the last id)
            return []
        rows = await self._call(
            lambda db: db.execute(
                "SELECT ledger_id, bookies, since FROM under_replicated WHERE ledger_id >= ? ORDER BY ledger_id LIMIT ?",
                (start, -1 if limit is None else limit),
            ).fetchall()
        )
        return [UnderReplicated(r[0], frozenset(json.loads(r[1])), r[2]) for r in rows]

    async def count_under_replicated(self) -> int:
        row = await self._call(lambda db: db.execute("SELECT COUNT(*) FROM under_replicated").fetchone())
        return int(row[0])

    async def clear_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        def clear(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT bookies FROM under_replicated WHERE ledger_id = ?", (ledger_id,)).fetchone()
            if row is None:
                return
            left = sorted(set(json.loads(row[0])) - set(bookies))
            if left:
                db.execute("UPDATE under_replicated SET bookies = ? WHERE ledger_id = ?", (json.dumps(left), ledger_id))
            else:
                db.execute("DELETE FROM under_replicated WHERE ledger_id = ?", (ledger_id,))

        await self._transaction(clear)

    async def set_decommissioned(self, bookie_id: str, decommissioned: bool) -> None:
        if decommissioned:
            sql = "INSERT OR IGNORE INTO decommissioned (id) VALUES (?)"
        else:
            sql = "DELETE FROM decommissioned WHERE id = ?"
        await self._call(lambda db: db.execute(sql, (bookie_id,)))

    async def list_decommissioned(self) -> set[str]:
        rows = await self._call(lambda db: db.execute("SELECT id FROM decommissioned").fetchall())
        return {r[0] for r in rows}

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._db.close, limiter=self._limiter)
        if self._lease_db is not None:
            await anyio.to_thread.run_sync(self._lease_db.close, limiter=self._lease_limiter)


def open_store(uri: str, *, create: bool) -> SqliteMetadataStore:
    return SqliteMetadataStore(uri, create=create)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store(
        "sqlite", open_store, description="sqlite:///PATH: embedded, shared by the processes of one machine"
    )
