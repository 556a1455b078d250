"""Autorecovery as a service: an auditor candidate (:mod:`.auditor`) and a replication
worker (:mod:`.worker`) sharing one client context -- and the offload service
(:mod:`bkframe.tiering.offload_service`) when ``[offload] enabled``. It runs inside a bookie when
``[autorecovery] enabled = true`` (the bookie service starts it, see
:func:`in_bookie`) or alone as ``bkframe autorecovery --metadata URI``.

Also what ``bkframe autorecovery status`` reports (:func:`cluster_status`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import attrs
import trio

from bkframe.autorecovery.auditor import Auditor
from bkframe.autorecovery.worker import KeyLookup, ReplicationWorker, _no_key
from bkframe.bookie.bookie import Bookie
from bkframe.client.context import ClientContext
from bkframe.client.settings import ClientSettings
from bkframe.common.each_bounded import each_bounded
from bkframe.core.config import AutorecoveryConfig, OffloadConfig
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import LEDGER_PAGE
from bkframe.core.plugin_manager import PluginManager
from bkframe.tiering.offload_service import OffloadService

log = logging.getLogger("bkframe.autorecovery")

#: Under-replicated ledgers ``status`` shows by default (a page; the count is of all).
STATUS_MARKS = 100
#: Lock holders ``status`` asks for at once (the worker of each mark shown).
STATUS_READS_IN_FLIGHT = 8


@attrs.define(eq=False)
class AutorecoveryService:
    """``await nursery.start(service.run)``: the auditor candidate and one worker, until cancelled.

    ``settings``: for the service's client (the placement policy of the copies); ``offload``:
    the offload service's config (run beside if ``enabled``)."""

    store: MetadataStore
    plugins: PluginManager
    config: AutorecoveryConfig
    holder: str = attrs.field(kw_only=True)
    key_for: KeyLookup = attrs.field(default=_no_key, kw_only=True)
    settings: ClientSettings | None = attrs.field(default=None, kw_only=True)
    offload: OffloadConfig | None = attrs.field(default=None, kw_only=True)
    auditor: Auditor | None = attrs.field(default=None, init=False)
    worker: ReplicationWorker | None = attrs.field(default=None, init=False)
    offloader: OffloadService | None = attrs.field(default=None, init=False)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as nursery:
            ctx = ClientContext.create(nursery, self.store, self.plugins, self.settings)
            self.auditor = Auditor(self.store, ctx.pool, self.holder, self.config)
            self.worker = ReplicationWorker(ctx, self.holder, self.config, key_for=self.key_for)
            await nursery.start(self.auditor.run)
            await nursery.start(self.worker.run)
            if self.offload is not None and self.offload.enabled:
                self.offloader = OffloadService(self.store, self.plugins, self.offload, holder=self.holder)
                await nursery.start(self.offloader.run, ctx)
            log.info("autorecovery running as %s", self.holder)
            task_status.started()


def in_bookie(bookie: Bookie, store: MetadataStore, bookie_id: str) -> AutorecoveryService:
    """The service a bookie runs (``[autorecovery] enabled``): its worker knows the master
    keys of the ledgers this bookie holds, so it can also recover open ledgers."""

    def key_for(ledger_id: int) -> bytes | None:
        state = bookie.storage.ledger_state(ledger_id)
        return bytes(state.master_key) if state is not None and state.master_key else None

    return AutorecoveryService(
        store, bookie.plugins, bookie.config.autorecovery, holder=bookie_id, key_for=key_for,
        settings=ClientSettings.for_bookie(bookie.config, bookie.own_credential()), offload=bookie.config.offload,
    )


async def cluster_status(
    store: MetadataStore, timeout_s: float = 30.0, *, start: int = 0, limit: int = STATUS_MARKS
) -> dict[str, Any]:
    """The auditor; how many ledgers are under-replicated and a page of them (``limit``
    marks of ledgers ``>= start``: age, lost bookies, the worker replicating each), with
    the ``start`` of the next page if more follow; the decommissioned bookies with how many
    ledgers still use them. Reads a page of marks, never all of them."""
    now = time.time()
    with trio.fail_after(timeout_s):
        auditor = await store.lock_holder("auditor")
        # An auditor inside a bookie holds the lock under the bookie's id: say where it runs.
        addresses = {b.bookie_id: b.address for b in await store.list_bookies()}
        count = await store.count_under_replicated()
        marks = await store.list_under_replicated(start=start, limit=limit + 1)
        page, more = marks[:limit], len(marks) > limit
        workers: dict[int, str | None] = {}

        async def worker_of(ledger_id: int) -> None:
            workers[ledger_id] = await store.lock_holder(f"ledger/{ledger_id}")

        await each_bounded([m.ledger_id for m in page], STATUS_READS_IN_FLIGHT, worker_of)
        ledgers = [
            {"ledger_id": m.ledger_id, "lost_bookies": sorted(m.bookies), "age_s": round(now - m.since, 1),
             "worker": workers[m.ledger_id]}
            for m in page
        ]
        decommissioned = sorted(await store.list_decommissioned())
        # Counted from the store's index of each bookie, not from every ledger's metadata.
        using = {b: await count_ledgers_using(store, b) for b in decommissioned}
    return {
        "auditor": auditor,
        "auditor_address": addresses.get(auditor or "", ""),
        "under_replicated_count": count,
        "under_replicated": ledgers,
        "under_replicated_next": page[-1].ledger_id + 1 if more else None,
        "decommissioned": [{"bookie_id": b, "ledgers": n} for b, n in using.items()],
    }


async def ledgers_using(store: MetadataStore, bookie_id: str, timeout_s: float = 30.0) -> list[int]:
    """The ledgers with a fragment on ``bookie_id``: the store's index of that bookie,
    paged (``timeout_s`` for each page)."""
    out: list[int] = []
    async for page in _index_pages(store, bookie_id, timeout_s):
        out += page
    return out


async def count_ledgers_using(store: MetadataStore, bookie_id: str, timeout_s: float = 30.0) -> int:
    """How many ledgers have a fragment on ``bookie_id`` (one page in memory at a time)."""
    n = 0
    async for page in _index_pages(store, bookie_id, timeout_s):
        n += len(page)
    return n


async def _index_pages(store: MetadataStore, bookie_id: str, timeout_s: float) -> AsyncIterator[list[int]]:
    start = 0
    while True:
        with trio.fail_after(timeout_s):
            page = await store.ledgers_of_bookie(bookie_id, start=start, limit=LEDGER_PAGE)
        if page:
            yield page
        if len(page) < LEDGER_PAGE:
            return
        start = page[-1] + 1
