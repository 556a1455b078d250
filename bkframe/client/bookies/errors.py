"""The errors a client raises about a bookie: a connection that failed, closed or timed
out, and the typed error for each error status a bookie answers (client policy: which
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


class BookieConnectionError(BKError, ConnectionError):
    """The connection to a bookie failed or closed before the response came."""


class ClientClosedError(BookieConnectionError):
    """The client closed the connection itself (it is closing, or the task holding the
    connection was cancelled): the request got no answer, but the bookie did not fail, and
    nothing may count it as failed (quarantine, ensemble change)."""


class BookieTimeoutError(BookieConnectionError):
    """A bookie did not answer a request in time: hung, overloaded or cut off. Callers
    treat it like a failed connection (the connection itself stays open: a late answer
    is dropped)."""
