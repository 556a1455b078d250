"""The typed errors a client raises for a bookie's error answers (client policy: which
status means which error for the caller; the protocol only carries the status)."""

from __future__ import annotations

from bkframe.errors import (
    BKError,
    BookieError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bkframe.proto.codes import Status


def error_for(status: Status, message: str, bookie: str = "", *, ledger_id: int = -1) -> BKError:
    """The typed error a client raises for a bookie's error status."""
    if status == Status.FENCED:
        return LedgerFencedError(f"{bookie}: {message}")
    if status == Status.UNAUTHORIZED:
        return UnauthorizedError(f"{bookie}: {message}")
    if status == Status.NO_ENTRY:
        return NoSuchEntryError(f"{bookie}: {message}")
    if status == Status.NO_LEDGER:
        return NoSuchLedgerError(ledger_id, f"{bookie}: {message}")
    return BookieError(status, message, bookie)
