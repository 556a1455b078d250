"""Built-in ledger types (durability policies).

``PD_JOURNAL`` is the default: an add is acknowledged only after its journal record is
fsynced, so an acknowledged entry survives any crash of the bookie. ``VD_JOURNAL``
(BP-14) acknowledges once the record is in the journal's buffer; bookies report which
entries are synced (LastAddSynced) and the client advances the LAC from that.
``BYPASS_JOURNAL`` (BP-46) writes entries only to ledger storage and acknowledges at once;
master keys and fences still go to the journal, synced. A bookie that may have lost
writes (unclean shutdown, replaced disk) protects such ledgers with fence + limbo and
repairs them from its peers (see :mod:`bkframe.autorecovery.data_integrity`).
"""

from __future__ import annotations

from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.durability import LedgerType
from bkframe.core.registry import ComponentRegistry

PD_JOURNAL = LedgerType(
    name="PD_JOURNAL",
    type_id=0,
    journal_data=True,
    sync_before_ack=True,
    description="persistent durability: acknowledged after the journal fsync; a crash loses nothing acknowledged",
)

VD_JOURNAL = LedgerType(
    name="VD_JOURNAL",
    type_id=1,
    journal_data=True,
    sync_before_ack=False,
    description=(
        "volatile durability (BP-14): acknowledged once written to the journal, before its fsync; "
        "LAC advances by the LastAddSynced rule; sync() and close() make entries durable"
    ),
    lac_by_sync=True,
)


BYPASS_JOURNAL = LedgerType(
    name="BYPASS_JOURNAL",
    type_id=2,
    journal_data=False,
    sync_before_ack=False,
    description=(
        "journal bypass (BP-46): entries go only to ledger storage, acknowledged before any fsync; "
        "after a crash the bookie fences the ledger, answers UNKNOWN for what it lacks and repairs from peers"
    ),
)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_ledger_type(PD_JOURNAL)
    registry.add_ledger_type(VD_JOURNAL)
    registry.add_ledger_type(BYPASS_JOURNAL)
