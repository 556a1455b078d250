"""BP-46 phase two: repair the ledgers a bookie put in limbo at boot (phase one is
:mod:`bkframe.bookie.durability.protection`).

For each limbo ledger, an open one is recovered (fence, find the end, close) when this
bookie holds its master key; without the key (a replaced disk) the repair waits until a
client recovers or closes it. Then every entry this bookie should hold (its positions in
each fragment's write sets) that it lacks (not in the index, ``LedgerStorage.held_entries``,
or unreadable: a torn write) is copied from a peer, asking peers first which entries they
hold (LIST_ENTRIES); once all are here and synced, limbo is cleared.

It needs both sides -- the bookie's storage and the client's recovery and connections --
which is why it lives in :mod:`bkframe.autorecovery`.
"""

from __future__ import annotations

import logging

import anyio
import numpy as np
import trio

from bkframe.autorecovery.copying import fetch_entries, list_on_peers
from bkframe.bookie.bookie import Bookie
from bkframe.client.bookies.pool import BookiePool
from bkframe.client.context import ClientContext
from bkframe.client.distribution import replicas, stored_at
from bkframe.client.entry_format import Digester
from bkframe.client.recovery import Recovery
from bkframe.client.settings import ClientSettings
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BKError, MetadataError, NoSuchLedgerError

log = logging.getLogger("bkframe.data_integrity")

#: Missing entries read from peers per round trip during repair.
COPY_BATCH = 256
#: Entry ids examined at a time when looking for what this bookie lacks.
REPAIR_WINDOW = 65536


class LimboRepair:
    """Phase two: recover and repair every limbo ledger, retrying with backoff until done."""

    def __init__(self, bookie: Bookie, store: MetadataStore, bookie_id: str, *, retry_s: float = 0.5) -> None:
        self.bookie = bookie
        self.store = store
        self.bookie_id = bookie_id
        self.retry_s = retry_s
        self.max_retry_s = 10.0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        pending = self.bookie.limbo_ledgers()
        if not pending:
            return
        log.info("repairing %d limbo ledger(s): %s", len(pending), pending)
        async with anyio.create_task_group() as nursery:
            settings = ClientSettings.for_bookie(self.bookie.config, self.bookie.own_credential())
            ctx = ClientContext.create(nursery, self.store, self.bookie.plugins, settings)
            delay = self.retry_s
            while pending:
                still: list[int] = []
                for ledger_id in pending:
                    try:
                        done = await self.repair(ctx, ledger_id)
                    except (BKError, MetadataError, ConnectionError, OSError) as e:
                        self.bookie.repair_status["last_error"] = f"ledger {ledger_id}: {e}"
                        log.info("repair of ledger %d not done yet: %s", ledger_id, e)
                        done = False
                    except Exception as e:
                        # Unexpected (a storage error, a bug met by one ledger): a background
                        # task never takes the bookie down; log it fully and retry later.
                        self.bookie.repair_status["last_error"] = f"ledger {ledger_id}: {e!r}"
                        log.exception("repair of ledger %d failed; retrying later", ledger_id)
                        done = False
                    if not done:
                        still.append(ledger_id)
                pending = still
                if pending:
                    await trio.sleep(delay)
                    delay = min(delay * 2, self.max_retry_s)
            nursery.cancel_scope.cancel()
        self.bookie.repair_status["last_error"] = ""
        log.info("every limbo ledger is repaired")

    async def repair(self, ctx: ClientContext, ledger_id: int) -> bool:
        """One attempt; True once the ledger left limbo (repaired or deleted)."""
        bookie = self.bookie
        storage = bookie.storage
        state = storage.ledger_state(ledger_id)
        if state is None or not state.limbo:
            return True
        try:
            md = await self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            log.info("limbo ledger %d was deleted; dropping it here", ledger_id)
            await bookie.delete_ledgers([ledger_id])
            return True
        if not md.closed:
            if not state.master_key:
                self.bookie.repair_status["last_error"] = (
                    f"ledger {ledger_id}: waiting for a client to recover or close it "
                    f"(this bookie holds no master key for it: it lost its disk, or never received an add "
                    f"of the ledger before it was protected)"
                )
                return False
            # The bookie cannot know the ledger's password, so it cannot check HMAC
            # digests: recovery then takes only copies that agree (see recovery.py).
            md = await Recovery(ctx, md, state.master_key, Digester.unkeyed(md.digest_type)).run()
        await self._copy_missing(ctx.pool, md)
        # The copies must be durable before limbo is cleared: the ledger-table slot that
        # clears it is in the page cache, and the kernel may write it back before any checkpoint.
        await bookie.checkpoint()
        storage.set_limbo(ledger_id, False)
        # Counted as limbo is cleared, not after the await: a status read in between would
        # see no limbo ledger left and one repair too few.
        bookie.repair_status["repaired_ledgers"] += 1
        await bookie.checkpoint()
        log.info("ledger %d repaired (last entry %d); out of limbo", ledger_id, md.last_entry_id)
        return True

    async def _copy_missing(self, pool: BookiePool, md: LedgerMetadata) -> None:
        """Copy every entry this bookie should hold and lacks, window by window."""
        digester = Digester.unkeyed(md.digest_type)
        storage = self.bookie.storage
        copied = 0
        bounds = [first for first, _ in md.fragments[1:]] + [md.last_entry_id + 1]
        for (first, ensemble), end in zip(md.fragments, bounds):
            if self.bookie_id not in ensemble:
                continue
            me = ensemble.index(self.bookie_id)
            e, w = len(ensemble), md.write_quorum
            for lo in range(first, end, REPAIR_WINDOW):
                hi = min(end, lo + REPAIR_WINDOW) - 1
                ids = np.arange(lo, hi + 1, dtype=np.int64)
                mine = ids[stored_at(me, ids, e, w)]
                held = np.asarray(storage.held_entries(md.ledger_id, lo, hi), dtype=np.int64)
                present = mine[np.isin(mine, held)].tolist()
                missing = mine[~np.isin(mine, held)].tolist()
                # The index can be ahead of the entry log after a crash (its pages reach the
                # disk on their own schedule), so an entry it lists may be torn: read it.
                torn = [i for i in present if not self._readable(md.ledger_id, i, digester)]
                if torn:
                    log.warning(
                        "ledger %d: %d local entries (first %d) are listed in the index but unreadable "
                        "(torn by the crash); copying them again", md.ledger_id, len(torn), torn[0],
                    )
                missing = sorted(missing + torn)
                if not missing:
                    continue
                holders = await list_on_peers(pool, md.ledger_id, lo, hi, [b for b in ensemble if b != self.bookie_id])
                for start in range(0, len(missing), COPY_BATCH):
                    chunk = []
                    for entry_id in missing[start : start + COPY_BATCH]:
                        peers = [b for b in replicas(ensemble, entry_id, w) if b != self.bookie_id]
                        # Peers known to hold the entry first; unknown ones (unlisted) after.
                        peers.sort(key=lambda b: 0 if entry_id in holders.get(b, ()) else 1 if b not in holders else 2)
                        chunk.append((entry_id, peers))
                    entry_ids, entries = await fetch_entries(pool, md.ledger_id, chunk, digester)
                    storage.add_entries(md.ledger_id, entry_ids, entries)
                    copied += len(entry_ids)
        self.bookie.repair_status["entries_copied"] += copied
        if copied:
            log.info("ledger %d: copied %d missing entries from peers", md.ledger_id, copied)

    def _readable(self, ledger_id: int, entry_id: int, digester: Digester) -> bool:
        """Held whole: the record is there and the entry's checksum covers its payload
        (for HMAC ledgers, whose MAC needs the password, only its header is checked)."""
        try:
            data = self.bookie.storage.get_entry(ledger_id, entry_id)
            if data is None:
                return False
            digester.decode(ledger_id, entry_id, data)
            return True
        except Exception:  # noqa: BLE001 - a short, torn or mismatched record: counted and logged by the caller
            return False
