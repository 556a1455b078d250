"""BP-46 phase one: protect ledgers at boot after possible data loss (phase two, the repair,
is :mod:`bkframe.autorecovery.data_integrity`).

Before the bookie serves anything, when the last shutdown was not clean or the cookie
check found a replaced/missing data dir, every ledger that may have lost acknowledged
writes here is **fenced** (so the old writer cannot add to it through this bookie: BP-46
scenario 1) and put in **limbo** (reads of what it lacks answer UNKNOWN, never NO_ENTRY:
scenario 2). Which ledgers:

* after an unclean shutdown: ledgers whose type acknowledges adds without a journal
  record (``journal_data = False``, e.g. BYPASS_JOURNAL), since only those lose writes;
* after a lost disk: every ledger, of every type;

and of those, every one with this bookie in an ensemble per the metadata store, closed
ones included: a closed ledger must stay closed to its old writer (scenario 1) and its
entries here must be restored too. Without a metadata store only local ledgers are known.

The store is asked for this bookie's ledgers only: the ids it indexes for this bookie
(:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.ledgers_of_bookie`, paged), then the metadata
of each, :data:`READS_IN_FLIGHT` at a time -- never the cluster's listing. A local ledger
the index does not name has metadata that does not name this bookie either (the index is
kept with each update), so it would not be chosen: it is not read.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import trio

from bkframe.bookie.startup.cookies import clear_data_loss, data_loss_marked
from bkframe.common.each_bounded import each_bounded
from bkframe.core.interfaces.metadata_store import MetadataStore, iter_ledgers_of_bookie
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import MetadataError, NoSuchLedgerError

if TYPE_CHECKING:
    from bkframe.bookie.bookie import Bookie

log = logging.getLogger("bkframe.data_integrity")

#: Metadata reads at once at boot: enough to hide a remote store's round trip.
READS_IN_FLIGHT = 32


def protect(bookie: Bookie, ledgers: Sequence[tuple[int, int]]) -> int:
    """Fence and put in limbo each ``(ledger_id, ledger_type)``; return how many changed.

    Ledgers this bookie has no trace of (a replaced disk) are created keyless, so that
    they refuse the old writer's adds and never answer "no such entry".
    Durable only after the next checkpoint; boot runs one before serving.
    """
    storage = bookie.storage
    changed = 0
    for ledger_id, ledger_type in ledgers:
        state = storage.ledger_state(ledger_id)
        if state is None:
            state = storage.ensure_ledger(ledger_id, b"", ledger_type)
        if state.fenced and state.limbo:
            continue
        if storage.set_fenced(ledger_id):
            bookie.counters.fenced_ledgers += 1
        storage.set_limbo(ledger_id, True)
        changed += 1
    return changed


def ledgers_to_protect(
    bookie: Bookie, bookie_id: str, metadata: Sequence[LedgerMetadata] | None, *, lost_disk: bool
) -> list[tuple[int, int]]:
    """``(ledger_id, type_id)`` of every ledger phase one must fence and put in limbo."""
    types = {t.name: t for t in bookie.plugins.ledger_types().values()}
    at_risk = {name for name, t in types.items() if lost_disk or not t.journal_data}
    at_risk_ids = {types[name].type_id for name in at_risk}
    chosen: dict[int, int] = {}
    if metadata is not None:
        for md in metadata:
            if md.ledger_type in at_risk and bookie_id in md.bookies():
                chosen[md.ledger_id] = types[md.ledger_type].type_id
    else:
        for ledger_id in bookie.storage.ledgers():
            state = bookie.storage.ledger_state(ledger_id)
            if state is not None and (lost_disk or state.ledger_type in at_risk_ids):
                chosen[ledger_id] = state.ledger_type
    return sorted(chosen.items())


async def read_own_metadata(store: MetadataStore, bookie_id: str) -> AsyncIterator[list[LedgerMetadata]]:
    """The metadata of the ledgers the store indexes for ``bookie_id``, a page at a time
    (memory in proportion to a page, not to the ledgers this bookie holds)."""
    async for page in iter_ledgers_of_bookie(store, bookie_id):
        yield await read_ledgers(store, page)


async def read_ledgers(store: MetadataStore, ledger_ids: Sequence[int]) -> list[LedgerMetadata]:
    """The metadata of ``ledger_ids`` that still exist, :data:`READS_IN_FLIGHT` reads at once."""
    found: dict[int, LedgerMetadata] = {}

    async def read(ledger_id: int) -> None:
        try:
            found[ledger_id] = await store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            pass  # deleted between the listing and the read

    await each_bounded(ledger_ids, READS_IN_FLIGHT, read)
    return [found[i] for i in sorted(found)]


async def protect_at_boot(bookie: Bookie, store: MetadataStore | None, bookie_id: str) -> int:
    """Phase one. Returns how many ledgers were newly fenced and put in limbo."""
    lost_disk = data_loss_marked(bookie.data_dir) or (bookie.cookie_check is not None and bookie.cookie_check.data_loss_suspected)
    if bookie.last_shutdown_clean and not lost_disk:
        return 0
    reason = "its data dir was replaced or lost" if lost_disk else "the last shutdown was not clean"
    if not bookie.config.bookie.data_loss_protection:
        log.warning(
            "%s but data_loss_protection is off: ledgers that lost writes here may answer NO_ENTRY "
            "and take writes after being closed (BP-46 scenarios 1 and 2)",
            reason,
        )
        return 0
    try:
        if store is None:
            todo = ledgers_to_protect(bookie, bookie_id, None, lost_disk=lost_disk)
        else:
            todo = []
            async for metadata in read_own_metadata(store, bookie_id):
                todo += ledgers_to_protect(bookie, bookie_id, metadata, lost_disk=lost_disk)
    except MetadataError as e:
        raise MetadataError(
            f"{reason}, so the bookie must fence and put in limbo the ledgers that may have lost "
            f"writes here before serving, but it cannot list them: {e}. Start it again once the "
            f"metadata store is reachable"
        ) from e
    changed = protect(bookie, todo)
    # Fence and limbo must be durable before the first request is served.
    await bookie.checkpoint()
    if lost_disk:
        await trio.to_thread.run_sync(clear_data_loss, bookie.data_dir)
    log.warning(
        "%s: fenced and put in limbo %d ledger(s) (%d already were); they are repaired in the background",
        reason,
        changed,
        len(todo) - changed,
    )
    return changed
