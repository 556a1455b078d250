"""Built-in ledger types (durability policies).

``PD_JOURNAL`` is the default: an add is acknowledged only after its journal record is
fsynced, so an acknowledged entry survives any crash of the bookie. ``VD_JOURNAL``
(BP-14) acknowledges once the record is in the journal's buffer; bookies report which
entries are synced (LastAddSynced) and the client advances the LAC from that.
"""

from __future__ import annotations

from collections.abc import Callable

from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces import DurabilityPolicy, LedgerType

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


@hookimpl
def bkframe_register_ledger_types(register: Callable[[DurabilityPolicy], None]) -> None:
    register(PD_JOURNAL)
    register(VD_JOURNAL)
