"""The bookie: journal + ledger storage + ledger types, composed from config by plugins.

:class:`Bookie` holds one bookie's parts and state; its concerns live in their own modules:
:mod:`.requests` answers requests (:mod:`.adds`, :mod:`.reads`, :mod:`.ledger_control`),
who may read without a key is :mod:`.access`, the metadata's word on a key :mod:`.key_check`;
the request handlers and the checkpointer are handed a :mod:`.context` of what they use.
Beside them, by concern: :mod:`bkframe.bookie.durability` (journal replay and checkpoints,
the BP-14 sync cursor, tombstones, BP-46 protection), :mod:`bkframe.bookie.runtime`
(garbage collector, read-only mode), :mod:`bkframe.bookie.startup` (cookies, identity).
:mod:`.service` runs it all; :mod:`bkframe.bookie.serving` is the network side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from bkframe.bookie.access import AccessPolicy
from bkframe.bookie.context import BookieContext
from bkframe.bookie.durability.checkpoint import Checkpointer
from bkframe.bookie.durability.sync_cursor import SyncTracker
from bkframe.bookie.durability.tombstones import Tombstones
from bkframe.bookie.key_check import KeyCheck
from bkframe.bookie.requests import RequestHandler
from bkframe.bookie.runtime.read_only_mode import ReadOnlyMode
from bkframe.bookie.runtime.space_reserve import DiskUsage, SpaceReserve
from bkframe.bookie.startup.cookies import CookieCheck, mark_clean, mark_running
from bkframe.core.config import Config
from bkframe.core.counters import Counters
from bkframe.core.interfaces.auth import AuthProvider, internal_credential, readers_of
from bkframe.core.interfaces.durability import DurabilityPolicy
from bkframe.core.interfaces.journal import Journal, JournalPosition
from bkframe.core.interfaces.ledger_storage import LedgerStorage
from bkframe.core.metadata import ClusterRecord
from bkframe.core.plugin_manager import PluginManager
from bkframe.proto.codes import PROTOCOL_VERSION
from bkframe.storage_kit.directory_lock import DirectoryLocks

#: The directory in the data dir the bookie hands each component section's plugin.
SECTION_DIRS = {"journal": "journal", "entry_log_manager": "entrylogs", "ledger_storage": "ledgers"}


def directories(config: Config, plugins: PluginManager) -> list[Path]:
    """Every directory a bookie of ``config`` writes: the data dir, then each component's
    directory and those its config declares (``[journal] dirs``, say), in that order."""
    data_dir = Path(config.bookie.data_dir)
    return [
        data_dir,
        *(
            d
            for section, name in SECTION_DIRS.items()
            for d in plugins.directories(
                section=section, config=getattr(config, section), directory=data_dir / name, source=config.source
            )
        ),
    ]


class Bookie:
    """One bookie's storage, state and request semantics (the network server is separate)."""

    def __init__(self, config: Config, plugins: PluginManager, *, cluster: ClusterRecord | None = None) -> None:
        self.config = config
        self.plugins = plugins
        self.counters = Counters()
        self.data_dir = Path(config.bookie.data_dir)
        self.started_at = time.time()  # a Unix time, for the metrics
        self.started_mono = time.monotonic()  # uptime: a step of the wall clock must not change it
        #: Who may use this bookie (``[auth]``): asked once per connection by the server.
        self.auth: AuthProvider = plugins.auth_provider_from_section(config.auth, source=f"{config.source}: [auth]")
        #: The metadata store's cluster record (None without a store): its secret is what
        #: the cluster's own processes authenticate with (see :mod:`bkframe.bookie.access`).
        self.cluster = cluster
        #: Who may read any ledger and copy without a key, per connection (see :mod:`bkframe.bookie.access`).
        self.access = AccessPolicy(
            cluster.secret if cluster is not None else b"",
            readers_of(config.auth, source=f"{config.source}: [auth]"),
        )
        #: One process per directory: every directory this bookie and its plugins write,
        #: locked before anything in them is read or written (see :mod:`bkframe.storage_kit.directory_lock`).
        dirs = directories(config, plugins)
        self.directory_locks = DirectoryLocks.acquire(dirs)
        try:
            #: Space kept back on each of those filesystems for fences and recovery adds on a
            #: full disk (see :mod:`bkframe.bookie.runtime.space_reserve`).
            self.reserve = SpaceReserve(dirs, config.bookie.reserved_space_bytes, config.bookie.disk_usage_threshold)
            self._compose(config, plugins)
        except BaseException:
            self.directory_locks.release()
            raise

    def _compose(self, config: Config, plugins: PluginManager) -> None:
        """Make the parts and the state, in the locked directories."""
        dirs = {section: self.data_dir / name for section, name in SECTION_DIRS.items()}
        #: What ledger storage and its entry logs keep (fsynced whole after an unclean stop).
        self.storage_dirs = (dirs["entry_log_manager"], dirs["ledger_storage"])
        where = config.source
        self.journal: Journal = plugins.journal(
            config=config.journal, directory=dirs["journal"], counters=self.counters, source=where
        )
        entry_logs = plugins.entry_log_manager(
            config=config.entry_log_manager, directory=dirs["entry_log_manager"], counters=self.counters, source=where
        )
        self.storage: LedgerStorage = plugins.ledger_storage(
            config=config.ledger_storage, directory=dirs["ledger_storage"], entry_logs=entry_logs, counters=self.counters,
            source=where,
        )
        #: The ledger types this bookie serves, by wire id.
        self.types_by_id: dict[int, DurabilityPolicy] = {t.type_id: t for t in plugins.ledger_types().values()}
        #: Whether the previous run stopped cleanly (BP-46); the marker is set for this run.
        self.last_shutdown_clean = mark_running(self.data_dir)
        #: Outcome of the cookie check at boot (None without a metadata store).
        self.cookie_check: CookieCheck | None = None
        #: Set once boot protection (BP-46 phase one) is done; requests wait for it.
        self.ready = trio.Event()
        #: Ledgers garbage collection deleted: never created again by an add or a fence.
        self.tombstones = Tombstones(self.data_dir, config.bookie.deleted_ledger_retention_s)
        #: What the limbo repair task reports in GET_BOOKIE_INFO.
        self.repair_status: dict[str, Any] = {"repaired_ledgers": 0, "entries_copied": 0, "last_error": ""}
        #: BookKeeper's read-only mode: on a full disk, no adds (reads, fences and recovery go on).
        self.mode = ReadOnlyMode(
            self.data_dir, config.bookie.disk_usage_threshold, config.bookie.disk_usage_lwm, self.reserve
        )
        #: BP-14 sync cursors of the ledgers acknowledged before their fsync.
        self.sync = SyncTracker(self.journal, self.journal_write_failed)
        #: What request handling and checkpoints use of this bookie.
        self.context = BookieContext(
            journal=self.journal,
            storage=self.storage,
            counters=self.counters,
            types_by_id=self.types_by_id,
            mode=self.mode,
            tombstones=self.tombstones,
            sync=self.sync,
            data_dir=self.data_dir,
            bookie_id=config.bookie.bookie_id,
        )
        self.checkpointer = Checkpointer(
            self.context,
            storage_dirs=self.storage_dirs,
            last_shutdown_clean=self.last_shutdown_clean,
            interval_s=config.bookie.checkpoint_interval_s,
        )
        self.requests = RequestHandler(self.context, info=self.info)

    @property
    def bookie_id(self) -> str:
        """This bookie's id: the config's, or set by the service once it listens."""
        return self.context.bookie_id

    @bookie_id.setter
    def bookie_id(self, bookie_id: str) -> None:
        self.context.bookie_id = bookie_id

    @property
    def key_check(self) -> KeyCheck | None:
        """Whether the metadata store vouches for a key of a ledger this bookie holds no key
        for (set by the service when there is a metadata store; see :mod:`.key_check`)."""
        return self.context.key_check

    @key_check.setter
    def key_check(self, check: KeyCheck | None) -> None:
        self.context.key_check = check

    def own_credential(self) -> tuple[str, bytes]:
        """What this bookie's own clients (limbo repair, recovery, re-replication) send in
        AUTH to its peers: the cluster-internal credential (with a metadata store, the only
        case where they run), else its provider's."""
        if self.cluster is not None:
            return internal_credential(self.cluster.secret)
        return self.auth.client_credential()

    @property
    def read_only(self) -> bool:
        return self.mode.read_only

    def measure_disk(self) -> DiskUsage:
        """Take back missing reserved space where there is room, and measure the fullest of
        the bookie's filesystems (blocking: statvfs, fallocate; off the event loop)."""
        return self.reserve.measure_and_refill()

    def check_disk(self) -> DiskUsage:
        """:meth:`measure_disk`, then enter or leave read-only mode (blocking: the service
        runs it off the event loop, except once at start)."""
        usage = self.measure_disk()
        self.mode.disk_checked(usage)
        return usage

    def journal_write_failed(self, error: BaseException) -> None:
        self.context.journal_write_failed(error)

    async def checkpoint(self) -> JournalPosition | None:
        """See :meth:`Checkpointer.checkpoint`: storage flushed, LastLogMark persisted, old
        journal files dropped; None if the mark found no space (the bookie turns read-only)."""
        return await self.checkpointer.checkpoint()

    async def aclose(self) -> None:
        """Make everything durable and close: journal, then storage, then the final mark,
        and only then clear the unclean-shutdown marker."""
        try:
            await self.checkpointer.close()
            await trio.to_thread.run_sync(mark_clean, self.data_dir)
        finally:
            self.directory_locks.release()  # last: another process may now use the directories

    async def delete_ledgers(self, ledger_ids: Sequence[int]) -> None:
        """Delete ledgers gone from the metadata store: tombstones first (durable), then
        every trace of them (durable at the next checkpoint)."""
        await trio.to_thread.run_sync(self.tombstones.record, ledger_ids)
        for ledger_id in ledger_ids:
            self.forget_ledger(ledger_id)

    def forget_ledger(self, ledger_id: int) -> None:
        """Drop a deleted ledger: its storage and every trace of it in this bookie
        (:meth:`delete_ledgers` also leaves a tombstone, so it is not created again)."""
        self.storage.delete_ledger(ledger_id)
        self.requests.forget(ledger_id)
        self.sync.forget(ledger_id)

    def limbo_ledgers(self) -> list[int]:
        storage = self.storage
        return [
            ledger_id
            for ledger_id in storage.ledgers()
            if (state := storage.ledger_state(ledger_id)) is not None and state.limbo
        ]

    def info(self) -> dict[str, Any]:
        usage = self.reserve.measure()
        return {
            "bookie_id": self.bookie_id,
            "protocol_version": PROTOCOL_VERSION,
            "uptime_s": round(time.monotonic() - self.started_mono, 3),
            "free_disk_bytes": usage.free,
            "total_disk_bytes": usage.total,
            "disk_usage": round(usage.fraction, 4),
            "disk_usage_threshold": self.mode.threshold,
            "disk_usage_lwm": self.mode.lwm,
            "reserved_space_bytes": self.reserve.held(),
            "read_only": self.mode.read_only,
            "read_only_reason": self.mode.reason,
            "ledgers": sum(1 for _ in self.storage.ledgers()),
            "ledger_types": {t.name: t.type_id for t in self.types_by_id.values()},
            "replayed_records": self.checkpointer.replayed_records,
            "last_shutdown_clean": self.last_shutdown_clean,
            "cookie_check": self.cookie_check.name if self.cookie_check else None,
            "limbo_ledgers": self.limbo_ledgers(),
            "deleted_ledgers_remembered": len(self.tombstones),
            "repair": dict(self.repair_status),
            "counters": self.counters.as_dict(),
        }
