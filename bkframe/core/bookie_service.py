"""Runs a composed bookie: replay, journal, checkpoints, server, and a clean stop."""

from __future__ import annotations

import logging
import os
from functools import partial

import trio

from bkframe.core.bookie import Bookie
from bkframe.core.config import Config
from bkframe.core.cookies import check_cookies
from bkframe.core.data_integrity import LimboRepair, protect_at_boot
from bkframe.core.garbage_collector import GarbageCollector
from bkframe.core.ledger_keys import key_matches
from bkframe.core.metadata import BookieInfo, BookieRegistration, MetadataStore, NoSuchLedgerError
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.server import BookieServer

log = logging.getLogger("bkframe.bookie")


#: How long the bookie waits for the metadata store when checking a master key.
KEY_CHECK_TIMEOUT_S = 10.0


async def verify_master_key(store: MetadataStore, ledger_id: int, key: bytes) -> bool:
    """Whether ``key`` is the master key of the ledger per its metadata (False if deleted)."""
    with trio.fail_after(KEY_CHECK_TIMEOUT_S):
        try:
            md = await store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            return False
    return key_matches(key, md.password_hash)


class BookieService:
    """``await nursery.start(service.run)`` returns ``(host, port)`` once connections are accepted."""

    def __init__(self, config: Config, plugins: PluginManager | None = None) -> None:
        self.config = config
        self.plugins = plugins if plugins is not None else PluginManager()
        self.bookie: Bookie | None = None
        self.server: BookieServer | None = None
        self._stop_requested = False

    def stop(self) -> None:
        """Stop accepting, drain in-flight requests (bounded), flush and return from run."""
        self._stop_requested = True
        if self.server is not None:
            self.server.stop()

    async def run(self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config.bookie
        bookie = self.bookie = Bookie(self.config, self.plugins)
        bookie.replay()
        server = self.server = BookieServer(bookie, cfg.host, cfg.port)
        if self._stop_requested:
            server.stop()
        store: MetadataStore | None = None
        registration: BookieRegistration | None = None
        try:
            if cfg.metadata:
                store = self.plugins.metadata_store(cfg.metadata)
            async with trio.open_nursery() as background:
                await background.start(bookie.journal.run)
                if bookie.replayed_records:
                    await bookie.checkpoint()
                await background.start(bookie.run_checkpoints)
                await background.start(bookie.run_sync_tracker)
                async with trio.open_nursery() as serving:
                    host, port = await serving.start(server.run)
                    bookie_id = cfg.bookie_id or f"{host}:{port}"
                    bookie.bookie_id = bookie_id
                    if store is not None:
                        bookie.cookie_check = await check_cookies(
                            store, bookie.data_dir, bookie_id, f"{host}:{port}",
                            auto_fix=cfg.auto_fix_cookies, metadata_uri=cfg.metadata,
                        )
                        log.info("bookie %s: %s", bookie_id, bookie.cookie_check.value)
                    if store is not None:
                        bookie.key_verifier = partial(verify_master_key, store)
                    await protect_at_boot(bookie, store, bookie_id)
                    bookie.ready.set()
                    if store is not None:
                        if bookie.limbo_ledgers():
                            background.start_soon(LimboRepair(bookie, store, bookie_id).run)
                        background.start_soon(GarbageCollector(bookie, store, cfg.gc_interval_s).run)
                        info = BookieInfo(bookie_id=bookie_id, address=f"{host}:{port}", pid=os.getpid())
                        registration = await store.register_bookie(info, cfg.registration_ttl_s, background)
                    task_status.started((host, port))
                background.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if registration is not None:
                    await registration.aclose()
                if store is not None:
                    await store.aclose()
                await bookie.aclose()
        log.info("bookie stopped cleanly")
