"""Runs a composed bookie: replay, journal, checkpoints, server, disk checks, and a clean stop.

Repairing limbo ledgers (BP-46 phase two) needs the client library, which the bookie
package never imports: whoever starts the service passes it in (``repair=LimboRepair``
from :mod:`bkframe.autorecovery.data_integrity`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

import trio

from bkframe.bookie.bookie import Bookie
from bkframe.bookie.durability.protection import protect_at_boot
from bkframe.bookie.key_check import KeyCheck
from bkframe.bookie.runtime.garbage_collector import GarbageCollector
from bkframe.bookie.runtime.loop_lag import LoopLag, settle_python_gc
from bkframe.bookie.serving.server import BookieServer
from bkframe.bookie.startup.cookies import check_cookies, read_local
from bkframe.bookie.startup.identity import Advertised, claim_id, default_bookie_id
from bkframe.bookie.startup.identity import advertised as advertised_address
from bkframe.bookie.startup.preflight import check_data_dir, check_ports
from bkframe.bookie.subscription_calls import SubscriptionCalls
from bkframe.common.cluster_record import init_cluster, require_cluster
from bkframe.core.config import Config
from bkframe.core.interfaces.ledger_storage import BackgroundStorage
from bkframe.core.interfaces.metadata_store import BookieRegistration, MetadataStore
from bkframe.core.metadata import BookieInfo, ClusterRecord
from bkframe.core.plugin_manager import PluginManager

log = logging.getLogger("bkframe.bookie")

#: Seconds a change of the read-only registration may take before it is retried.
REGISTRATION_UPDATE_TIMEOUT_S = 10.0


class Repair(Protocol):
    """A background task that repairs a bookie's limbo ledgers, then returns."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


#: ``repair(bookie, store, bookie_id)``: what repairs limbo ledgers (a metadata store is needed).
RepairFactory = Callable[[Bookie, MetadataStore, str], Repair]


class AdminHttp(Protocol):
    """The admin HTTP service of a bookie: ``await nursery.start(admin.run)`` returns its URL."""

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None: ...


#: ``admin(service)``: makes the admin HTTP service (``[http] enabled``), normally
#: :class:`bkframe.admin.AdminServer`; it lives outside the core because its status page uses
#: the client library, which the bookie never imports.
AdminFactory = Callable[["BookieService"], AdminHttp]


class Background(Protocol):
    """A service that runs until cancelled (autorecovery)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None: ...


#: ``autorecovery(bookie, store, bookie_id)``: the autorecovery service run when
#: ``[autorecovery] enabled`` (normally :func:`bkframe.autorecovery.service.in_bookie`).
AutorecoveryFactory = Callable[[Bookie, MetadataStore, str], Background]

class SubscriptionHost(Background, SubscriptionCalls, Protocol):
    """The host of subscription owners (:class:`bkframe.subscriptions.host.SubscriptionHost`):
    a background service, and what serves the bookie's SUB_* requests."""


#: ``subscriptions(bookie, store, bookie_id)``: the subscription host run when ``[subscriptions]
#: enabled`` (normally made by :func:`bkframe.cli.bookie.subscription_host`).
SubscriptionsFactory = Callable[[Bookie, MetadataStore, str], SubscriptionHost]

#: Seconds between a failed subscription host's end and its next start.
SUBSCRIPTIONS_RETRY_S = 1.0

#: A starting bookie waits this long past the registration TTL for another registration of
#: its id to expire (a bookie that just died elsewhere) before it refuses to start.
ID_WAIT_MARGIN_S = 2.0

#: Seconds between a bookie's looks at whether it was decommissioned.
DECOMMISSION_CHECK_S = 2.0


class BookieService:
    """``await nursery.start(service.run)`` returns ``(host, port)`` once connections are accepted.

    :param repair: makes the task that repairs limbo ledgers (BP-46 phase two), normally
        :class:`~bkframe.autorecovery.data_integrity.LimboRepair`.
    :param autorecovery: makes the autorecovery service, run if ``[autorecovery] enabled``.
    :param subscriptions: makes the host of subscription owners, run if ``[subscriptions]
        enabled`` (docs/subscriptions.md); without it SUB_* requests are refused NOT_OWNER.
    :param init_cluster: make the metadata store a cluster if it is none (``bkframe bookie
        --init-cluster``); without it, a bookie refuses to start on a store that holds no
        cluster (:mod:`bkframe.common.cluster_record`), and nothing is stamped.
    :param settle_python_gc: once the storage is loaded, collect and freeze the heap and
        raise the young collections' threshold (:mod:`bkframe.bookie.runtime.loop_lag`), so that no collection
        walks every ledger's state; for a process that runs nothing but this bookie
        (``bkframe bookie``), since it changes the garbage collector of the whole process.
    """

    def __init__(
        self,
        config: Config,
        plugins: PluginManager | None = None,
        *,
        repair: RepairFactory,
        admin: AdminFactory | None = None,
        autorecovery: AutorecoveryFactory | None = None,
        subscriptions: SubscriptionsFactory | None = None,
        init_cluster: bool = False,
        settle_python_gc: bool = False,
    ) -> None:
        self.config = config
        self.init_cluster = init_cluster
        #: Freeze the heap once loaded (:mod:`bkframe.bookie.runtime.loop_lag`): for a process that is only a bookie.
        self.settle_python_gc = settle_python_gc
        #: The metadata store's cluster record, once checked (None without a store).
        self.cluster: ClusterRecord | None = None
        self.plugins = plugins if plugins is not None else PluginManager()
        self.repair = repair
        self.admin = admin
        self.autorecovery = autorecovery
        self.subscriptions = subscriptions
        self.bookie: Bookie | None = None
        self.server: BookieServer | None = None
        #: With a metadata store: the bookie's metadata store and garbage collector (the
        #: admin service lists ledgers and triggers collections through them).
        self.store: MetadataStore | None = None
        self.gc: GarbageCollector | None = None
        #: The admin HTTP service's URL once it listens ("" when off).
        self.admin_url = ""
        #: What the bookie registers and clients connect to, once it listens.
        self.advertised: Advertised | None = None
        self._stop_requested = False
        #: How long the event loop is held (the admin metrics report it).
        self.loop_lag = LoopLag()

    def stop(self) -> None:
        """Stop accepting, drain in-flight requests (bounded), flush and return from run."""
        self._stop_requested = True
        if self.server is not None:
            self.server.stop()

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        """Start in order -- open the store and the storage (replay), start the background
        tasks, serve, then (with a store) claim the id and check the cookies, protect ledgers,
        join the cluster -- and on the way out stop serving, then the background, then close."""
        cfg = self.config.bookie
        # Before anything is made or stamped: a port in use fails here, leaving no journal,
        # cookie or registration behind (a data dir that is a file, or a store that is no
        # cluster, in _open).
        await check_ports(self.config, http=self.config.http.enabled and self.admin is not None)
        bookie, store = await self._open()
        server = self.server = BookieServer(bookie, cfg.host, cfg.port)
        if self._stop_requested:
            server.stop()
        registration: BookieRegistration | None = None
        try:
            # Two nurseries for the order of the stop: serving ends first (stop() drains the
            # server), then the background tasks are cancelled, then everything is closed.
            async with trio.open_nursery() as background:
                await self._start_background(bookie, background)
                async with trio.open_nursery() as serving:
                    host, port = await serving.start(server.run)
                    bookie_id = self._identify(bookie, host, port)
                    stale = await self._check_in(bookie, store, bookie_id, background) if store is not None else None
                    await protect_at_boot(bookie, store, bookie_id)
                    bookie.ready.set()
                    if store is not None:
                        registration = await self._join_cluster(bookie, store, bookie_id, stale, background)
                    background.start_soon(self._watch_disk, bookie, registration)
                    if self.config.http.enabled and self.admin is not None:
                        self.admin_url = await background.start(self.admin(self).run)  # cancelled with the rest, after serving
                    task_status.started((host, port))
                background.cancel_scope.cancel()
        finally:
            await self._close(bookie, store, registration)
        log.info("bookie stopped cleanly")

    async def _open(self) -> tuple[Bookie, MetadataStore | None]:
        """The metadata store (checked to be this bookie's cluster) and the bookie, its journal
        replayed into its storage. What failed half-way is closed again: its directory locks
        released (what a restart in this process needs), the store closed."""
        cfg = self.config.bookie
        store: MetadataStore | None = None
        try:
            if cfg.metadata:
                # Before anything is made or stamped: the store must be a cluster this bookie knows.
                store = self.store = self.plugins.metadata_store(cfg.metadata, create=self.init_cluster)
                self.cluster = await self._check_cluster(store)
            check_data_dir(cfg.data_dir)  # makes it: only once the store is known good
            # Locks every directory first (DirectoryLockedError if another process holds one):
            # a second bookie on them replays, marks, stamps and registers nothing.
            bookie = self.bookie = Bookie(self.config, self.plugins, cluster=self.cluster)
            # Before anything is written: a bookie starting on a full disk starts read-only.
            bookie.check_disk()
            bookie.checkpointer.replay()
            if self.settle_python_gc:
                settle_python_gc()
        except BaseException:
            if self.bookie is not None:
                self.bookie.directory_locks.release()
            if store is not None:
                with trio.CancelScope(shield=True):
                    await store.aclose()
            raise
        return bookie, store

    async def _start_background(self, bookie: Bookie, background: trio.Nursery) -> None:
        """The tasks that run before and after serving: loop lag, the journal, the
        checkpoint of what was replayed, the checkpointer, the sync cursors, the storage's own."""
        await background.start(self.loop_lag.run)
        await background.start(bookie.journal.run)
        if bookie.checkpointer.replayed_records:
            await bookie.checkpoint()  # on a full disk: read-only, the old mark stays
        await background.start(bookie.checkpointer.run)
        await background.start(bookie.sync.run)
        if isinstance(bookie.storage, BackgroundStorage):
            await background.start(bookie.storage.run)

    def _identify(self, bookie: Bookie, host: str, port: int) -> str:
        """The address to advertise for where the server listens, and the bookie's id."""
        cfg = self.config.bookie
        advertised = self.advertised = advertised_address(host, port, cfg.advertised_address)
        bookie_id = bookie.bookie_id = cfg.bookie_id or default_bookie_id(bookie.data_dir, advertised)
        # Not "listening on": that is said once, when the bookie serves (after its cookies are checked).
        log.info("bookie %s: bound to %s:%d, advertised as %s (%s)", bookie_id, host, port, advertised, advertised.source)
        return bookie_id

    async def _check_in(
        self, bookie: Bookie, store: MetadataStore, bookie_id: str, background: trio.Nursery
    ) -> BookieInfo | None:
        """Before anything is stamped, no other live bookie may hold this id; then the cookies
        are compared (or stamped), and the key checks may read the store. Returns a stale
        registration of this id (a dead process of this machine) for registering to replace."""
        cfg = self.config.bookie
        assert self.advertised is not None
        stale = await claim_id(
            store, bookie_id, bookie.data_dir, self.advertised, wait_s=cfg.registration_ttl_s + ID_WAIT_MARGIN_S
        )
        bookie.cookie_check = await check_cookies(
            store,
            bookie.data_dir,
            bookie_id,
            str(self.advertised),
            auto_fix=cfg.auto_fix_cookies,
            metadata_uri=cfg.metadata,
        )
        log.info("bookie %s: %s", bookie_id, bookie.cookie_check.value)
        # Reads in the background: a request waits key_check_wait_s at most.
        bookie.key_check = KeyCheck(store, nursery=background, wait_s=cfg.key_check_wait_s)
        return stale

    async def _join_cluster(
        self, bookie: Bookie, store: MetadataStore, bookie_id: str, stale: BookieInfo | None, background: trio.Nursery
    ) -> BookieRegistration:
        """Once the bookie is ready: the repair of limbo ledgers, the garbage collector, the
        registration (what clients find), the decommission watch and autorecovery."""
        cfg = self.config.bookie
        assert self.advertised is not None
        if bookie.limbo_ledgers():
            background.start_soon(self.repair(bookie, store, bookie_id).run)
        self.gc = GarbageCollector(bookie, store, cfg.gc_interval_s)
        background.start_soon(self.gc.run)
        cookie = read_local(bookie.data_dir)
        info = BookieInfo(
            bookie_id=bookie_id,
            address=str(self.advertised),
            read_only=bookie.read_only,
            pid=os.getpid(),
            rack=cfg.rack,
            instance=cookie.instance_id if cookie is not None else "",
        )
        registration = await store.register_bookie(info, cfg.registration_ttl_s, background, replace=stale)
        background.start_soon(self._watch_decommission, bookie, store, bookie_id)
        if self.config.autorecovery.enabled and self.autorecovery is not None:
            background.start_soon(self._run_autorecovery, bookie, store, bookie_id)
        if self.config.subscriptions.enabled and self.subscriptions is not None:
            host = self.subscriptions(bookie, store, bookie_id)
            bookie.context.subscriptions = host  # refuses calls NOT_OWNER until it runs
            background.start_soon(self._run_subscriptions, host)
        return registration

    @staticmethod
    async def _close(bookie: Bookie, store: MetadataStore | None, registration: BookieRegistration | None) -> None:
        """Unregister, close the store, then the bookie (flushed, marked clean), whatever
        cancels the service."""
        with trio.CancelScope(shield=True):
            if registration is not None:
                await registration.aclose()
            if store is not None:
                await store.aclose()
            await bookie.aclose()

    async def _check_cluster(self, store: MetadataStore) -> ClusterRecord:
        if not self.init_cluster:
            return await require_cluster(store, hint=" (or start this bookie with --init-cluster)")
        record, created = await init_cluster(store)
        if created:
            log.info("created cluster %s in %s", record.instance_id, store.uri)
        return record

    async def _run_autorecovery(self, bookie: Bookie, store: MetadataStore, bookie_id: str) -> None:
        """Autorecovery in this bookie; if it ever fails, log it and start it again: it never
        takes the bookie down."""
        assert self.autorecovery is not None
        while True:
            try:
                await self.autorecovery(bookie, store, bookie_id).run()
            except Exception:
                log.exception("autorecovery failed; starting it again")
            await trio.sleep(self.config.autorecovery.check_interval_s)

    async def _run_subscriptions(self, host: SubscriptionHost) -> None:
        """The subscription host; if it ever fails, log it and start it again: it never takes
        the bookie down (its owners' locks expire, and consumers go to another bookie meanwhile)."""
        while True:
            try:
                await host.run()
            except Exception:
                log.exception("the subscription host failed; starting it again")
            await trio.sleep(SUBSCRIPTIONS_RETRY_S)

    async def _watch_decommission(self, bookie: Bookie, store: MetadataStore, bookie_id: str) -> None:
        """A decommissioned bookie refuses adds (as read-only), so writers move off it by an
        ensemble change while autorecovery copies its ledgers away; reads go on."""
        while True:
            try:
                with trio.fail_after(REGISTRATION_UPDATE_TIMEOUT_S):
                    decommissioned = bookie_id in await store.list_decommissioned()
                bookie.mode.set_draining(decommissioned)
            except Exception as e:  # noqa: BLE001 - a store's failure, or its timeout: never fatal here
                log.warning("could not check whether this bookie is decommissioned (%r)", e)
            await trio.sleep(DECOMMISSION_CHECK_S)

    async def _watch_disk(self, bookie: Bookie, registration: BookieRegistration | None) -> None:
        """Check the disk every ``disk_check_interval_s`` and keep the registration's
        read-only flag in step with the bookie's (a write that found no space changes it
        between checks). Failures are logged and retried: this task never ends the bookie."""
        interval = self.config.bookie.disk_check_interval_s
        published = bookie.read_only
        limiter = trio.CapacityLimiter(1)
        while True:
            changed = bookie.mode.changed
            if registration is not None and published != bookie.read_only:
                wanted = bookie.read_only
                try:
                    with trio.fail_after(REGISTRATION_UPDATE_TIMEOUT_S):
                        await registration.set_read_only(wanted)
                    published = wanted
                    log.info("registered as %s", "read-only" if wanted else "writable")
                except Exception as e:  # noqa: BLE001 - a store's failure, or its timeout: never fatal here
                    log.warning("could not register as %s (%r); retrying", "read-only" if wanted else "writable", e)
            with trio.move_on_after(interval):
                await changed.wait()
                continue  # publish the change now; the disk check follows at the interval
            try:
                # statvfs may hang on a sick disk: off the loop, and a hung check blocks only this task.
                usage = await trio.to_thread.run_sync(bookie.measure_disk, limiter=limiter, abandon_on_cancel=True)
            except OSError as e:
                log.warning("disk check of %s failed: %s", bookie.data_dir, e)
                continue
            bookie.mode.disk_checked(usage)
