"""Built-in ledger types (durability policies).

``PD_JOURNAL`` is the default: an add is acknowledged only after its journal record is
fsynced, so an acknowledged entry survives any crash of the bookie.
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


@hookimpl
def bkframe_register_ledger_types(register: Callable[[DurabilityPolicy], None]) -> None:
    register(PD_JOURNAL)
