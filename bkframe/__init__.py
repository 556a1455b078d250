"""bkframe: a replicated, durable log store in the model of Apache BookKeeper.

``import bkframe`` gives the trio-native client (:func:`open_client`), the blocking facade
(:func:`connect`), the handles and values they return, every error (one root,
:class:`BKError`), and :data:`hookimpl` for plugin authors (whose API is ``bkframe.core``).
"""

from bkframe.core.client.blocking import (
    BlockingClient,
    BlockingLogReader,
    BlockingLogs,
    BlockingLogWriter,
    BlockingReadHandle,
    BlockingTail,
    BlockingWriteHandle,
    connect,
)
from bkframe.core.client.client import Client, open_client
from bkframe.core.client.log_client import CursorInfo, LogInfo, Logs
from bkframe.core.client.log_reader import LogReader
from bkframe.core.client.log_writer import LogWriter, PendingLogAppend
from bkframe.core.client.logs import (
    CommitResult,
    Cursor,
    LogEntry,
    LogMetadata,
    LogSettings,
    Position,
    Segment,
    SegmentRange,
    TrimResult,
)
from bkframe.core.client.read_handle import Entry, ReadHandle
from bkframe.core.client.settings import ClientSettings
from bkframe.core.client.write_handle import PendingAppend, WriteHandle
from bkframe.core.hookspecs import hookimpl
from bkframe.core.metadata import DigestType, LedgerMetadata, LedgerStateName
from bkframe.errors import (
    BadVersionError,
    BKError,
    BookieError,
    CommitError,
    ConfigError,
    CursorExistsError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerExistsError,
    LedgerFencedError,
    LogError,
    LogExistsError,
    LogFencedError,
    MetadataError,
    NoSuchCursorError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NoSuchLogError,
    NotEnoughBookiesError,
    PluginError,
    PositionTrimmedError,
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
    "BlockingLogReader",
    "BlockingLogWriter",
    "BlockingLogs",
    "BlockingReadHandle",
    "BlockingTail",
    "BlockingWriteHandle",
    "BookieError",
    "Client",
    "ClientSettings",
    "CommitError",
    "CommitResult",
    "ConfigError",
    "Cursor",
    "CursorExistsError",
    "CursorInfo",
    "DigestType",
    "Entry",
    "LedgerClosedError",
    "LedgerDeletedError",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerMetadata",
    "LedgerStateName",
    "LogEntry",
    "LogError",
    "LogExistsError",
    "LogFencedError",
    "LogInfo",
    "LogMetadata",
    "LogReader",
    "LogSettings",
    "LogWriter",
    "Logs",
    "MetadataError",
    "NoSuchCursorError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NotEnoughBookiesError",
    "PendingAppend",
    "PendingLogAppend",
    "PluginError",
    "Position",
    "PositionTrimmedError",
    "ProtocolError",
    "ReadHandle",
    "RecoveryError",
    "Segment",
    "SegmentRange",
    "TrimResult",
    "UnauthorizedError",
    "UnknownLedgerTypeError",
    "UnsupportedError",
    "WriteHandle",
    "connect",
    "hookimpl",
    "open_client",
]
