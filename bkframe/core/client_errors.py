"""Typed exceptions of the client library; each bookie status code maps to one."""

from __future__ import annotations

from bkframe.core.protocol import Status


class BKError(Exception):
    """Base class of every client error."""


class LedgerFencedError(BKError):
    """The ledger was fenced (someone opened it with recovery); this writer must stop."""


class LedgerDeletedError(LedgerFencedError):
    """The ledger was deleted (after another client recovered it); this writer must stop.
    A :class:`LedgerFencedError`, as BookKeeper's old writer sees it."""


class UnauthorizedError(BKError):
    """Wrong password for the ledger."""


class LedgerClosedError(BKError):
    """The ledger is closed; no more entries can be added."""


class NoSuchEntryError(BKError):
    """The entry does not exist (or is beyond what may be read)."""


class NoSuchLedgerError(BKError):
    """The ledger does not exist."""


class NotEnoughBookiesError(BKError):
    """Too few live, writable bookies for the requested ensemble or quorum."""


class BookieError(BKError):
    """A bookie answered with an error status."""

    def __init__(self, status: Status, message: str, bookie: str = "") -> None:
        super().__init__(f"{bookie or 'bookie'}: {status.name}: {message}")
        self.status = status
        self.bookie = bookie


class RecoveryError(BKError):
    """Recovery could not decide where the ledger ends (too many bookies unknown); retry later."""


class UnsupportedError(BKError):
    """The operation is not allowed for this ledger (e.g. ensemble change for a non-PD type)."""


def error_for(status: Status, message: str, bookie: str = "") -> BKError:
    if status == Status.FENCED:
        return LedgerFencedError(f"{bookie}: {message}")
    if status == Status.UNAUTHORIZED:
        return UnauthorizedError(f"{bookie}: {message}")
    if status == Status.NO_ENTRY:
        return NoSuchEntryError(f"{bookie}: {message}")
    if status == Status.NO_LEDGER:
        return NoSuchLedgerError(f"{bookie}: {message}")
    return BookieError(status, message, bookie)
