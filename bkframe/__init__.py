"""bkframe: a replicated, durable log store in the model of Apache BookKeeper.

``import bkframe`` gives the async client (:func:`open_client`, under asyncio or trio), the blocking facade
(:func:`connect`), the handles and values they return, every error (one root,
:class:`BKError`), and :data:`hookimpl` for plugin authors (whose API is ``bkframe.core``).
"""

import importlib.metadata

from bkframe.client.blocking import (
    BlockingClient,
    BlockingLogReader,
    BlockingLogs,
    BlockingLogWriter,
    BlockingReadHandle,
    BlockingTail,
    BlockingWriteHandle,
    RunAhead,
    connect,
)
from bkframe.client.client import Client, open_client
from bkframe.client.logs.api import CursorInfo, LogInfo, Logs
from bkframe.client.logs.columns import Envelopes, decode_envelopes, payload_column
from bkframe.client.logs.envelope import ENVELOPE_CUSTOM, BadRecordError, DecodedRecord, Record, decode_record, encode_record
from bkframe.client.logs.model import (
    EARLIEST,
    LATEST,
    CommitResult,
    Cursor,
    LogEntry,
    LogMetadata,
    LogSettings,
    Position,
    Segment,
    SegmentRange,
    TrimResult,
    Where,
    check_name,
    parse_where,
)
from bkframe.client.logs.reader import LogReader
from bkframe.client.logs.writer import LogWriter, PendingLogAppend, PendingLogBatch
from bkframe.client.read_handle import Entry, EntryBlock, ReadHandle
from bkframe.client.settings import ClientSettings
from bkframe.client.write_handle import PendingAppend, WriteHandle
from bkframe.core.hookspecs import hookimpl
from bkframe.core.metadata import DigestType, LedgerMetadata, LedgerStateName
from bkframe.errors import (
    BadVersionError,
    BKError,
    BookieError,
    BookieIdInUseError,
    CommitError,
    ConfigError,
    CursorExistsError,
    EntryTooLargeError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerExistsError,
    LedgerFencedError,
    LogError,
    LogExistsError,
    LogFencedError,
    MetadataError,
    NoClusterError,
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

try:
    __version__ = importlib.metadata.version("bkframe")  # the one source: the distribution's metadata (pyproject.toml)
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "EARLIEST",
    "ENVELOPE_CUSTOM",
    "LATEST",
    "BKError",
    "BadRecordError",
    "BadVersionError",
    "BlockingClient",
    "BlockingLogReader",
    "BlockingLogWriter",
    "BlockingLogs",
    "BlockingReadHandle",
    "BlockingTail",
    "BlockingWriteHandle",
    "BookieError",
    "BookieIdInUseError",
    "Client",
    "ClientSettings",
    "CommitError",
    "CommitResult",
    "ConfigError",
    "Cursor",
    "CursorExistsError",
    "CursorInfo",
    "DecodedRecord",
    "DigestType",
    "Entry",
    "EntryBlock",
    "EntryTooLargeError",
    "Envelopes",
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
    "NoClusterError",
    "NoSuchCursorError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NotEnoughBookiesError",
    "PendingAppend",
    "PendingLogAppend",
    "PendingLogBatch",
    "PluginError",
    "Position",
    "PositionTrimmedError",
    "ProtocolError",
    "ReadHandle",
    "Record",
    "RecoveryError",
    "RunAhead",
    "Segment",
    "SegmentRange",
    "TrimResult",
    "UnauthorizedError",
    "UnknownLedgerTypeError",
    "UnsupportedError",
    "Where",
    "WriteHandle",
    "check_name",
    "connect",
    "decode_envelopes",
    "decode_record",
    "encode_record",
    "hookimpl",
    "open_client",
    "parse_where",
    "payload_column",
]
