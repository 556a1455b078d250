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

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "open_client":
        from bkframe.core.client import open_client

        return open_client
    if name == "connect":
        from bkframe.blocking import connect

        return connect
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
    "connect",
    "hookimpl",
    "open_client",
]
