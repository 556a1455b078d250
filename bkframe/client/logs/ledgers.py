"""What named logs use of the ledger client.

Logs are built on ledgers, and the client offers logs (``client.logs``): so the logs
package names the ledger operations it needs as a :class:`typing.Protocol`, and
:class:`bkframe.Client` is one without either module importing the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bkframe.client.context import ClientContext
from bkframe.client.read_handle import ReadHandle
from bkframe.client.write_handle import WriteHandle
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import DigestType, LedgerMetadata


class LedgerClient(Protocol):
    """The ledger operations of :class:`bkframe.Client` that logs use."""

    #: The client's context: its nursery runs the log writer's background work.
    context: ClientContext
    metadata: MetadataStore

    async def create_ledger(
        self,
        *,
        ensemble: int = ...,
        write_quorum: int = ...,
        ack_quorum: int = ...,
        ledger_type: str = ...,
        digest: DigestType | str = ...,
        password: bytes = ...,
        custom: Mapping[str, str] | None = ...,
        claim: bool = ...,
    ) -> WriteHandle: ...

    async def open_ledger(self, ledger_id: int, *, password: bytes = ..., recovery: bool = ...) -> ReadHandle: ...

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata: ...

    async def delete_ledger(self, ledger_id: int) -> None: ...
