"""Ledger types: how an add is made durable and acknowledged (:class:`DurabilityPolicy`),
and :class:`LedgerType`, the plain value most ledger types are."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs


@runtime_checkable
class DurabilityPolicy(Protocol):
    """A ledger type: how an add to a ledger of this type is made durable and acknowledged.

    Read-only attributes: a frozen attrs class (like :class:`LedgerType`) satisfies it.
    """

    @property
    def name(self) -> str:
        """The ledger type's name as users and metadata spell it, e.g. ``"PD_JOURNAL"``."""
        ...

    @property
    def type_id(self) -> int:
        """The id carried in ADD requests on the wire (0-65535, unique per bookie)."""
        ...

    @property
    def journal_data(self) -> bool:
        """Entry data is written to the journal."""
        ...

    @property
    def sync_before_ack(self) -> bool:
        """The add is acknowledged only after the journal record is fsynced."""
        ...

    @property
    def description(self) -> str:
        """One line for ``bkframe plugins`` and the docs."""
        ...

    @property
    def lac_by_sync(self) -> bool:
        """BP-14: acks do not mean durable, so bookies track LastAddSynced and the client
        advances the LAC by the LastAddSynced rule (otherwise: on A acknowledgements)."""
        ...


@attrs.frozen
class LedgerType:
    """A plain :class:`DurabilityPolicy` value, enough for most ledger types."""

    name: str
    type_id: int
    journal_data: bool
    sync_before_ack: bool
    description: str
    lac_by_sync: bool = False
