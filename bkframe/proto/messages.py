"""The wire protocol's vocabulary: op codes, status codes, flags, limits, and the
requests and responses as values (:mod:`.codec` turns them into bytes and back).

``docs/protocol.md`` documents every byte; keep the three in step. In short: a connection
carries length-prefixed *frames* in both directions; a frame holds one or more
*messages*, each with its own length, an op code, flags and a request id. Responses carry
the request id of their request and may come in any order and any grouping.
All integers are little-endian.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from bkframe.errors import (
    BKError,
    BookieError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
    UnauthorizedError,
)

PROTOCOL_VERSION = 1

FRAME_HEADER = struct.Struct("<I")
#: Every message starts with: length of the rest u32, op u8, flags-or-status u8, request id u64.
MSG_HEADER = struct.Struct("<IBBQ")
#: Frames larger than this close the connection: the peer is not speaking our protocol.
MAX_FRAME_SIZE = 64 * 1024 * 1024
MAX_MASTER_KEY = 64
#: Ledger ids are u64 on the wire, but metadata stores keep them as signed 64-bit integers
#: (sqlite, ZooKeeper and etcd paths, BookKeeper's own ``long``): larger ones are refused.
MAX_LEDGER_ID = (1 << 63) - 1


class Op(enum.IntEnum):
    ERROR = 0  # only in responses: a message that could not be parsed
    ADD = 1
    READ = 2
    READ_LAC = 3
    GET_BOOKIE_INFO = 4
    ADD_BATCH = 5
    SYNC = 6
    WRITE_LAC = 7
    LIST_ENTRIES = 8
    WRITE_CLOSE = 9
    READ_BATCH = 10
    #: The first message of a connection: who the client is (see bkframe.core.auth).
    AUTH = 11
    #: Right after AUTH, in its frame: what the client understands (see :class:`Feature`).
    FEATURES = 12


class Status(enum.IntEnum):
    OK = 0
    NO_LEDGER = 1
    NO_ENTRY = 2
    FENCED = 3
    UNAUTHORIZED = 4
    UNKNOWN = 5
    READ_ONLY = 6
    BAD_REQUEST = 7
    IO_ERROR = 8
    TOO_MANY_REQUESTS = 9
    #: Not decided yet (the metadata store has not vouched for the ledger's key): send the
    #: same request to the same bookie again. Only to clients that sent FEATURES TRY_AGAIN.
    TRY_AGAIN = 10


class AddFlag(enum.IntFlag):
    RECOVERY = 0x01


class ReadLacFlag(enum.IntFlag):
    #: Hold the response until the bookie's LAC passes ``previous_lac`` or the timeout ends.
    LONG_POLL = 0x01


class ReadFlag(enum.IntFlag):
    FENCE = 0x01


class Feature(enum.IntFlag):
    """What a client understands beyond protocol version 1 (a FEATURES request's bits)."""

    #: Answers with status TRY_AGAIN, which it sends again to the same bookie.
    TRY_AGAIN = 0x01


#: Frames a client builds are cut at about this size (a frame holds whole messages).
TARGET_FRAME_SIZE = 1024 * 1024
#: The largest entry a client may send (its ``max_entry_size`` is at most this): one frame
#: carries the entry with the rest of its ADD_BATCH and the messages queued before it (each
#: part under TARGET_FRAME_SIZE), and still stays under MAX_FRAME_SIZE.
MAX_ENTRY_SIZE = MAX_FRAME_SIZE - 4 * TARGET_FRAME_SIZE

#: Read of this entry id means "the last entry this bookie holds" (as in BookKeeper).
LAST_ENTRY = -1
#: A LIST_ENTRIES answer covers at most this many entry ids; ``next`` says where to go on.
MAX_LIST_SPAN = 1 << 20
#: READ_BATCH: at most this many entries asked in one request.
MAX_READ_BATCH = 1 << 16
#: The directory of an ADD_BATCH: one (entry id, length) per entry, in order.
BATCH_DIRECTORY = np.dtype([("entry_id", "<i8"), ("length", "<u4")])


# --- requests -----------------------------------------------------------------------


@attrs.frozen
class AddRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    lac: int
    ledger_type: int
    master_key: bytes
    data: memoryview
    recovery: bool = False


@attrs.frozen
class ReadRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes = b""
    fence: bool = False


@attrs.frozen
class ReadLacRequest:
    request_id: int
    ledger_id: int
    #: Long poll: answer once the LAC is above this (None: answer at once).
    previous_lac: int | None = None
    timeout_ms: int = 0


@attrs.frozen
class BookieInfoRequest:
    request_id: int


@attrs.frozen
class BadMessage:
    """A message of a frame that could not be parsed; answered with BAD_REQUEST."""

    request_id: int
    op: int
    reason: str


@attrs.frozen
class AddBatchRequest:
    """Many entries of one ledger in one message: the add path's fast lane."""

    request_id: int
    ledger_id: int
    lac: int
    ledger_type: int
    master_key: bytes
    entry_ids: list[int]
    entries: list[memoryview]
    recovery: bool = False


@attrs.frozen
class SyncRequest:
    request_id: int
    ledger_id: int


@attrs.frozen
class WriteLacRequest:
    """An explicit LAC from the writer (answered once journaled and synced)."""

    request_id: int
    ledger_id: int
    lac: int
    master_key: bytes


@attrs.frozen
class ListEntriesRequest:
    """Which entries of ``first..last`` a bookie holds (repair picks its sources with it)."""

    request_id: int
    ledger_id: int
    first: int
    last: int


@attrs.frozen
class ReadBatchRequest:
    """Entries ``first, first + step, ...`` up to ``last`` of one ledger in one answer: the
    bookie sends the entries it holds from ``first`` on, in order, stopping before the first
    it lacks or once about ``max_bytes`` are in the answer (always at least one entry if it
    holds ``first``). ``step`` > 1 reads the entries a bookie holds of a striped ledger.
    ``master_key``: the ledger's, as READ carries it (a keyless read is served only to a
    principal allowed to read every ledger)."""

    request_id: int
    ledger_id: int
    first: int
    last: int
    max_bytes: int
    step: int = 1
    master_key: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen
class WriteCloseRequest:
    """BP-32 advisory write close: the writer is done with the ledger."""

    request_id: int
    ledger_id: int
    master_key: bytes


@attrs.frozen
class AuthRequest:
    """Who the client is: an auth method name and its credential (a token, or nothing when
    the TLS certificate says it). The credential is a secret: never in a repr or a log."""

    request_id: int
    method: str
    credential: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen
class FeaturesRequest:
    """What the client understands (:class:`Feature` bits); sent after AUTH in its frame."""

    request_id: int
    features: int


#: Longest AUTH method name and credential accepted.
MAX_AUTH_METHOD = 255
MAX_AUTH_CREDENTIAL = 16 * 1024


Request = (
    WriteCloseRequest
    | AuthRequest
    | FeaturesRequest
    | AddRequest
    | ReadRequest
    | ReadLacRequest
    | BookieInfoRequest
    | AddBatchRequest
    | SyncRequest
    | WriteLacRequest
    | ListEntriesRequest
    | ReadBatchRequest
)


@attrs.frozen(eq=False)
class BatchEntries:
    """A READ_BATCH response's entries where they arrived: entry ``entry_ids[i]`` is
    ``data[starts[i]:ends[i]]``. No object per entry: a range read checks and cuts them
    with array operations (1 KiB entries are read at hundreds of thousands a second)."""

    entry_ids: npt.NDArray[np.int64]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    data: bytes | memoryview

    def __len__(self) -> int:
        return len(self.entry_ids)

    def pairs(self) -> tuple[tuple[int, bytes], ...]:
        data = self.data
        return tuple(
            (i, bytes(data[s:e])) for i, s, e in zip(self.entry_ids.tolist(), self.starts.tolist(), self.ends.tolist())
        )


@attrs.frozen
class Response:
    """A decoded response (client side)."""

    op: Op
    status: Status
    request_id: int
    ledger_id: int = 0
    entry_id: int = -1
    #: ADD: the bookie's LastAddSynced; READ: the bookie's LAC; READ_LAC, WRITE_LAC: the LAC.
    lac: int = -1
    #: READ_LAC: the last entry the bookie holds.
    last_entry: int = -1
    #: READ: the entry. Other ops: empty.
    data: bytes = b""
    #: A non-OK status's explanation, from the bookie.
    message: str = ""
    info: dict[str, Any] | None = None
    #: LIST_ENTRIES: inclusive (first, last) runs of held entries, where to continue (-1:
    #: the asked range is complete), and whether the ledger is in limbo on that bookie.
    runs: tuple[tuple[int, int], ...] = ()
    next_first: int = -1
    limbo: bool = False
    #: READ_BATCH: the entries sent, in order (None for other ops and for errors).
    batch: BatchEntries | None = None
    #: FEATURES: the :class:`Feature` bits the bookie will use on this connection.
    features: int = 0

    @property
    def entries(self) -> tuple[tuple[int, bytes], ...]:
        """READ_BATCH: the entries sent, in order, as (entry id, entry): one object per
        entry; range reads use :attr:`batch` as it is."""
        return self.batch.pairs() if self.batch is not None else ()



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


__all__ = [
    "BATCH_DIRECTORY",
    "FRAME_HEADER",
    "LAST_ENTRY",
    "MAX_AUTH_CREDENTIAL",
    "MAX_AUTH_METHOD",
    "MAX_ENTRY_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_LEDGER_ID",
    "MAX_LIST_SPAN",
    "MAX_MASTER_KEY",
    "MAX_READ_BATCH",
    "MSG_HEADER",
    "PROTOCOL_VERSION",
    "TARGET_FRAME_SIZE",
    "AddBatchRequest",
    "AddFlag",
    "AddRequest",
    "AuthRequest",
    "BadMessage",
    "BatchEntries",
    "BookieInfoRequest",
    "Feature",
    "FeaturesRequest",
    "ListEntriesRequest",
    "Op",
    "ProtocolError",
    "ReadBatchRequest",
    "ReadFlag",
    "ReadLacFlag",
    "ReadLacRequest",
    "ReadRequest",
    "Request",
    "Response",
    "Status",
    "SyncRequest",
    "WriteCloseRequest",
    "WriteLacRequest",
    "error_for",
]
