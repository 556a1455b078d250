"""bkframe: a replicated, durable log store in the model of Apache BookKeeper.

``import bkframe`` gives the async client (:func:`open_client`, under asyncio or trio), the blocking facade
(:func:`connect`), the handles and values they return, every error (one root,
:class:`BKError`), and :data:`hookimpl` for plugin authors (whose API is ``bkframe.core``).
The errors are imported with the package; every other name when it is first used (see
``_DEFINED_IN``), so that a process that needs one part of bkframe does not import the rest.
"""

import importlib
from typing import TYPE_CHECKING, Any

from bkframe.errors import (
    BadVersionError,
    BKError,
    BookieError,
    BookieIdInUseError,
    CommitError,
    CompactionError,
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
    NoSuchSubscriptionError,
    NotEnoughBookiesError,
    NotOwnerError,
    PluginError,
    PositionTrimmedError,
    ProtocolError,
    RecoveryError,
    SubscriptionError,
    SubscriptionExistsError,
    UnauthorizedError,
    UnknownLedgerTypeError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from bkframe.client.blocking import (
        BlockingClient,
        BlockingLogReader,
        BlockingLogs,
        BlockingLogWriter,
        BlockingMessage,
        BlockingReadHandle,
        BlockingSubscription,
        BlockingTail,
        BlockingWriteHandle,
        RunAhead,
        connect,
    )
    from bkframe.client.client import Client, open_client
    from bkframe.client.logs.api import CursorInfo, LogInfo, Logs
    from bkframe.client.logs.columns import Envelopes, decode_envelopes, payload_column
    from bkframe.client.logs.compacted import read_index as read_compacted_index
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
    from bkframe.subscriptions.consumer import Message, Subscription
    from bkframe.subscriptions.owner import SubscriptionStats
    from bkframe.subscriptions.settings import SubscriptionRecord, SubscriptionSettings

#: Where every other public name is defined: imported on first use (PEP 562), so that a process
#: that needs one part of bkframe -- ``bkframe --version``, a metadata-only command, a plugin --
#: does not pay for the client's imports (numpy, anyio, trio: ~0.4 s of CPU). Type checkers
#: read the imports above; tests/test_public_api.py checks that both name the same things.
_DEFINED_IN: dict[str, tuple[str, ...]] = {
    "bkframe.client.blocking": (
        "BlockingClient", "BlockingLogReader", "BlockingLogs", "BlockingLogWriter", "BlockingMessage", "BlockingReadHandle",
        "BlockingSubscription", "BlockingTail", "BlockingWriteHandle", "RunAhead", "connect",
    ),
    "bkframe.client.client": ("Client", "open_client"),
    "bkframe.client.logs.api": ("CursorInfo", "LogInfo", "Logs"),
    "bkframe.client.logs.columns": ("Envelopes", "decode_envelopes", "payload_column"),
    "bkframe.client.logs.compacted": ("read_compacted_index",),
    "bkframe.client.logs.envelope": (
        "ENVELOPE_CUSTOM", "BadRecordError", "DecodedRecord", "Record", "decode_record", "encode_record",
    ),
    "bkframe.client.logs.model": (
        "EARLIEST", "LATEST", "CommitResult", "Cursor", "LogEntry", "LogMetadata", "LogSettings", "Position", "Segment",
        "SegmentRange", "TrimResult", "Where", "check_name", "parse_where",
    ),
    "bkframe.client.logs.reader": ("LogReader",),
    "bkframe.client.logs.writer": ("LogWriter", "PendingLogAppend", "PendingLogBatch"),
    "bkframe.client.read_handle": ("Entry", "EntryBlock", "ReadHandle"),
    "bkframe.client.settings": ("ClientSettings",),
    "bkframe.client.write_handle": ("PendingAppend", "WriteHandle"),
    "bkframe.core.hookspecs": ("hookimpl",),
    "bkframe.core.metadata": ("DigestType", "LedgerMetadata", "LedgerStateName"),
    "bkframe.subscriptions.consumer": ("Message", "Subscription"),
    "bkframe.subscriptions.owner": ("SubscriptionStats",),
    "bkframe.subscriptions.settings": ("SubscriptionRecord", "SubscriptionSettings"),
}
_MODULE_OF = {name: module for module, names in _DEFINED_IN.items() for name in names}
#: The names published under another name than their module's.
_ALIASES = {"read_compacted_index": "read_index"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib import metadata

        try:  # the one source: the distribution's metadata (pyproject.toml)
            version = metadata.version("bkframe")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'bkframe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ALIASES.get(name, name))
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    "BlockingMessage",
    "BlockingReadHandle",
    "BlockingSubscription",
    "BlockingTail",
    "BlockingWriteHandle",
    "BookieError",
    "BookieIdInUseError",
    "Client",
    "ClientSettings",
    "CommitError",
    "CommitResult",
    "CompactionError",
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
    "Message",
    "MetadataError",
    "NoClusterError",
    "NoSuchCursorError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NoSuchSubscriptionError",
    "NotEnoughBookiesError",
    "NotOwnerError",
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
    "Subscription",
    "SubscriptionError",
    "SubscriptionExistsError",
    "SubscriptionRecord",
    "SubscriptionSettings",
    "SubscriptionStats",
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
    "read_compacted_index",
]
