"""bkframe: a replicated, durable log store in the model of Apache BookKeeper.

``import bkframe`` gives the trio-native client (:func:`open_client`), the blocking facade
(:func:`connect`), the handles and values they return, every error (one root,
:class:`BKError`), and :data:`hookimpl` for plugin authors (whose API is ``bkframe.core``).
"""

from bkframe.core.client.blocking import BlockingClient, BlockingReadHandle, BlockingWriteHandle, connect
from bkframe.core.client.client import Client, open_client
from bkframe.core.client.read_handle import Entry, ReadHandle
from bkframe.core.client.settings import ClientSettings
from bkframe.core.client.write_handle import PendingAppend, WriteHandle
from bkframe.core.hookspecs import hookimpl
from bkframe.core.metadata import DigestType, LedgerMetadata, LedgerStateName
from bkframe.errors import (
    BadVersionError,
    BKError,
    BookieError,
    ConfigError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerExistsError,
    LedgerFencedError,
    MetadataError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    PluginError,
    ProtocolError,
    RecoveryError,
    UnauthorizedError,
    UnknownLedgerTypeError,
    UnsupportedError,
)

__version__ = "0.1.0"

__all__ = [
    "BKError",
    "BadVersionError",
    "BlockingClient",
    "BlockingReadHandle",
    "BlockingWriteHandle",
    "BookieError",
    "Client",
    "ClientSettings",
    "ConfigError",
    "DigestType",
    "Entry",
    "LedgerClosedError",
    "LedgerDeletedError",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerMetadata",
    "LedgerStateName",
    "MetadataError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "PendingAppend",
    "PluginError",
    "ProtocolError",
    "ReadHandle",
    "RecoveryError",
    "UnauthorizedError",
    "UnknownLedgerTypeError",
    "UnsupportedError",
    "WriteHandle",
    "connect",
    "hookimpl",
    "open_client",
]
