"""The auditor on the memory store, in process: one auditor at a time; a lost lock stops it
at once and another takes over; a bookie gone past the grace, and a decommissioned one at
once, get their ledgers marked. (With real bookies: test_autorecovery*.py.)"""

from __future__ import annotations

import uuid

import trio

from bkframe import LedgerMetadata
from bkframe.autorecovery.auditor import Auditor
from bkframe.client.context import ClientContext
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.metadata_memory import MemoryMetadataStore
from bkframe.testing.kit import wait_until


async def test_one_auditor_a_lost_lock_stops_it_and_marks(nursery: trio.Nursery) -> None:
    store = MemoryMetadataStore(f"memory://{uuid.uuid4().hex}")
    await store.register_bookie(BookieInfo("b1", "127.0.0.1:1"), 6.0, nursery)
    await store.register_bookie(BookieInfo("b2", "127.0.0.1:2"), 6.0, nursery)
    for ledger_id, ensemble in ((1, ("b1", "b2")), (2, ("b2", "gone")), (3, ("b1", "b2"))):
        md = LedgerMetadata(ledger_id=ledger_id, ensemble_size=2, write_quorum=2, ack_quorum=1, fragments=((0, ensemble),))
        await store.create_ledger(md)
    config = AutorecoveryConfig(lost_bookie_grace_s=1.0, check_interval_s=0.05, audit_interval_s=0.0)
    ctx = ClientContext.create(nursery, store, PluginManager())
    auditors = {name: Auditor(store, ctx.pool, name, config) for name in ("x", "y")}
    for a in auditors.values():
        await nursery.start(a.run)

    async def one_auditing() -> bool:
        return sum(a.status.auditing for a in auditors.values()) == 1

    await wait_until(one_auditing, "one auditor", 10, every_s=0.02)
    first = await store.lock_holder("auditor")
    assert first is not None and auditors[first].status.auditing
    # Within the grace: "gone" is known missing (the takeover's full check read the
    # ledger naming it) but not lost yet.
    auditor = auditors[first]
    await wait_until(lambda: auditor.status.full_checks >= 1, "the takeover's full check", 10, every_s=0.02)
    assert "gone" in auditor.last_seen and not auditor.lost_bookies()
    assert await store.list_under_replicated() == []
    store.expire_lock("auditor")  # as if its keep-alive failed: it must stop at once
    await wait_until(lambda: not auditor.status.auditing, "the auditor that lost its lock to stop", 10, every_s=0.01)
    await wait_until(one_auditing, "one auditor", 10, every_s=0.02)
    await wait_until(lambda: _marked(store, 2), "ledger 2 marked", 10, every_s=0.02)
    [mark] = await store.list_under_replicated()
    assert (mark.ledger_id, mark.bookies) == (2, frozenset({"gone"}))
    # A decommissioned bookie: its ledgers at once, though it is alive.
    await store.set_decommissioned("b1", True)
    await wait_until(lambda: _marked(store, 1, 3), "ledgers 1 and 3 marked", 2, every_s=0.02)
    assert sum(a.status.auditing for a in auditors.values()) == 1
    nursery.cancel_scope.cancel()


async def _marked(store: MemoryMetadataStore, *ledger_ids: int) -> bool:
    marked = {m.ledger_id for m in await store.list_under_replicated()}
    return set(ledger_ids) <= marked
