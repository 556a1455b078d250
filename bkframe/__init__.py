"""bkframe: a replicated, durable log store in the model of Apache BookKeeper.

``import bkframe`` gives the trio-native client (:func:`open_client`) and the blocking
facade (:func:`connect`); plugin authors use :data:`hookimpl` and ``bkframe.core``.
"""

from bkframe.core.client_errors import (
    BKError,
    BookieError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    RecoveryError,
    UnauthorizedError,
    UnsupportedError,
)
from bkframe.core.hookspecs import hookimpl
from bkframe.core.logs import (
    CommitError,
    LogError,
    LogExistsError,
    LogFencedError,
    NoSuchCursorError,
    NoSuchLogError,
    Position,
    PositionTrimmedError,
)

__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - lazy so that plugins importing hookimpl stay light
    if name == "open_client":
        from bkframe.core.client import open_client

        return open_client
    if name == "connect":
        from bkframe.blocking import connect

        return connect
    if name in ("Logs", "LogSettings", "LogWriter", "LogReader", "LogEntry"):
        import bkframe.core.log_client as lc
        import bkframe.core.log_reader as lr
        import bkframe.core.log_writer as lw
        import bkframe.core.logs as lm

        for mod in (lc, lr, lw, lm):
            if hasattr(mod, name):
                return getattr(mod, name)
    if name in ("Client", "WriteHandle", "ReadHandle", "Entry", "LedgerMetadata", "DigestType"):
        import bkframe.core.client as c
        import bkframe.core.metadata as m
        import bkframe.core.read_handle as r
        import bkframe.core.write_handle as w

        for mod in (c, m, r, w):
            if hasattr(mod, name):
                return getattr(mod, name)
    raise AttributeError(f"module 'bkframe' has no attribute {name!r}")


__all__ = [
    "BKError",
    "BookieError",
    "LedgerClosedError",
    "LedgerDeletedError",
    "LedgerFencedError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "RecoveryError",
    "UnauthorizedError",
    "UnsupportedError",
    "CommitError",
    "LogError",
    "LogExistsError",
    "LogFencedError",
    "NoSuchCursorError",
    "NoSuchLogError",
    "Position",
    "PositionTrimmedError",
    "Logs",
    "LogSettings",
    "hookimpl",
    "open_client",
    "connect",
]
