"""One root for every error bkframe raises on purpose (:mod:`bkframe.errors` is this module).

They live in :mod:`bkframe.core` because they are part of a plugin's contract: a metadata
store raises :class:`BadVersionError` on a lost compare-and-set, a journal derives its fatal
error from :class:`BKError`.

``except bkframe.BKError`` catches anything the library, the bookie or a plugin meant to
raise; the command line turns each into a one-line message and exit status 1. The
families, each importable from here:

* configuration and plugins: :class:`ConfigError`, :class:`PluginError`,
  :class:`UnknownLedgerTypeError`;
* the metadata store: :class:`MetadataError` (:class:`LedgerExistsError`,
  :class:`BadVersionError`), and :class:`NoSuchLedgerError` -- one class, whether the
  metadata store or a bookie says so;
* the wire protocol: :class:`ProtocolError`; a bookie's error status as the client sees it:
  :class:`BookieError` and the typed ones (:class:`LedgerFencedError`, ...);
* the client: :class:`NotEnoughBookiesError`, :class:`RecoveryError`,
  :class:`EntryTooLargeError`, ...;
* named logs: :class:`LogError` and its kinds (:class:`NoSuchLogError` -- one class, whether
  the metadata store or the client says so -- :class:`LogFencedError`,
  :class:`PositionTrimmedError`, :class:`CommitError`, ...).

Errors that belong to one part stay in its module and derive from :class:`BKError` too
(for example ``CookieError`` in :mod:`bkframe.bookie.startup.cookies`,
``JournalCorruptError`` in :mod:`bkframe.core.interfaces`).
"""

from __future__ import annotations

import enum


class BKError(Exception):
    """Base class of every error bkframe raises on purpose."""


# -- configuration and plugins ------------------------------------------------------------


class ConfigError(BKError, ValueError):
    """The configuration is wrong; the message says where and what to do."""


class PluginError(BKError):
    """Plugins disagree (two register one name) or a component is not installed."""


class UnknownLedgerTypeError(PluginError, ValueError):
    """A ledger type name or id that no plugin registered."""


# -- the metadata store -------------------------------------------------------------------


class MetadataError(BKError):
    """A metadata store failed or holds something unreadable."""


class NoSuchLedgerError(BKError):
    """The ledger does not exist: its metadata is gone, or a bookie does not hold it."""

    def __init__(self, ledger_id: int, message: str = "") -> None:
        super().__init__(message or f"ledger {ledger_id} does not exist")
        self.ledger_id = ledger_id


class LedgerExistsError(MetadataError):
    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} already exists")
        self.ledger_id = ledger_id


class BookieIdInUseError(MetadataError):
    """Another live bookie (another data dir, another instance) is registered under this id:
    two bookies may never share one. Nothing was changed."""


class BadVersionError(MetadataError):
    """A compare-and-set lost: the stored version is not the expected one."""


class NoClusterError(MetadataError):
    """The metadata store holds no bkframe cluster (``bkframe cluster init`` makes one), or
    one whose layout this bkframe does not know."""


# -- the wire protocol and bookie answers ---------------------------------------------------


class ProtocolError(BKError, ValueError):
    """Bytes that do not follow the protocol."""


class BookieError(BKError):
    """A bookie answered with an error status: ``status`` is a :class:`bkframe.proto.Status`
    (typed as its base here: this module imports nothing of the protocol, which imports it)."""

    def __init__(self, status: enum.IntEnum, message: str, bookie: str = "") -> None:
        super().__init__(f"{bookie or 'bookie'}: {status.name}: {message}")
        self.status = status
        self.bookie = bookie


class LedgerFencedError(BKError):
    """The ledger was fenced (someone opened it with recovery); this writer must stop."""


class LedgerDeletedError(LedgerFencedError):
    """The ledger was deleted (after another client recovered it); this writer must stop.
    A :class:`LedgerFencedError`, as BookKeeper's old writer sees it."""


class UnauthorizedError(BKError):
    """Wrong password for the ledger, or a bookie refused the client's authentication
    (wrong or missing token, a principal it does not accept: see docs/security.md)."""


class NoSuchEntryError(BKError):
    """The entry does not exist (or is beyond what may be read)."""


# -- the client ---------------------------------------------------------------------------


class LedgerClosedError(BKError):
    """The ledger is closed; no more entries can be added."""


class EntryTooLargeError(BKError, ValueError):
    """An entry is larger than the bookies take (``max_entry_size``). The client refuses it
    before sending anything: the writer goes on, and the entry should be split.
    ``size`` is the payload's length, ``maximum`` the largest payload allowed."""

    def __init__(self, message: str, size: int = 0, maximum: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.maximum = maximum


class NotEnoughBookiesError(BKError):
    """Too few live, writable bookies for the requested ensemble or quorum."""


class RecoveryError(BKError):
    """Recovery could not decide where the ledger ends (too many bookies unknown); retry later."""


class UnsupportedError(BKError):
    """The operation is not allowed for this ledger (e.g. ensemble change for a non-PD type)."""


# -- named logs -----------------------------------------------------------------------------


class LogError(BKError):
    """Something about a named log went wrong (a subclass says what)."""


class NoSuchLogError(LogError):
    """The named log does not exist -- one class, whether the metadata store or the client says so."""

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(message or f"log {name!r} does not exist")
        self.name = name


class LogExistsError(LogError, MetadataError):
    """A log of that name exists already."""

    def __init__(self, name: str) -> None:
        super().__init__(f"log {name!r} already exists")
        self.name = name


class LogFencedError(LogError):
    """Another writer opened the log: this writer must stop (nothing it had acknowledged is lost)."""


class PositionTrimmedError(LogError):
    """The position was trimmed away by retention (or a trim)."""


class NoSuchCursorError(LogError):
    """The log has no cursor of that name."""


class CursorExistsError(LogError):
    """The log has a cursor of that name already."""


class CommitError(LogError):
    """``commit_ledgers`` was given ledgers it cannot commit (open, unknown, wrong password, in the log already)."""


class TierError(BKError):
    """An object-store tier failed or could not be reached (worth trying again later)."""


class NoSuchObjectError(TierError):
    """The tier holds no object under that key."""


class ObjectExistsError(TierError):
    """A conditional put found an object under the key already."""


class CompactionError(LogError):
    """A log could not be compacted (docs/compaction.md): its policy is not ``key``, or
    another compactor holds it. Nothing of the log changed."""


class SubscriptionError(LogError):
    """A subscription could not do what was asked (docs/subscriptions.md)."""


class NoSuchSubscriptionError(SubscriptionError):
    """The log has no subscription of that name."""


class SubscriptionExistsError(SubscriptionError):
    """The log already has a subscription or a cursor of that name."""


class NotOwnerError(SubscriptionError):
    """This process does not own the subscription (any more): another one does, or it was
    fenced. ``holder`` names the owner when known; ask it instead."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


__all__ = [
    "BKError",
    "BadVersionError",
    "BookieError",
    "BookieIdInUseError",
    "CommitError",
    "CompactionError",
    "ConfigError",
    "CursorExistsError",
    "EntryTooLargeError",
    "LedgerClosedError",
    "LedgerDeletedError",
    "LedgerExistsError",
    "LedgerFencedError",
    "LogError",
    "LogExistsError",
    "LogFencedError",
    "MetadataError",
    "NoClusterError",
    "NoSuchCursorError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NoSuchObjectError",
    "NoSuchSubscriptionError",
    "NotEnoughBookiesError",
    "NotOwnerError",
    "ObjectExistsError",
    "PluginError",
    "PositionTrimmedError",
    "ProtocolError",
    "RecoveryError",
    "SubscriptionError",
    "SubscriptionExistsError",
    "TierError",
    "UnauthorizedError",
    "UnknownLedgerTypeError",
    "UnsupportedError",
]

