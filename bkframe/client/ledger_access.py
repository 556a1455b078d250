"""What every client-side user of one ledger starts from: its writer, its readers and its recovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkframe.client.entry_format import Digester
from bkframe.core.metadata import LedgerMetadata

if TYPE_CHECKING:
    from bkframe.client.context import ClientContext


class LedgerAccess:
    """The client's context, the ledger's metadata as last read, and the key and digester
    its entries are sent and checked with (made from the password by the opener)."""

    ledger_id: int
    metadata: LedgerMetadata

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        self._ctx = ctx
        self.metadata = metadata
        self.ledger_id = metadata.ledger_id
        self._master_key = master_key
        self._digester = digester
