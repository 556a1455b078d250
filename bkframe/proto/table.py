"""The one description of the wire's operations, and the two decoders of a frame's
messages built on it: :func:`decode_requests` (bookies; never raises for bad input) and
:func:`decode_responses` (clients; raises :class:`~bkframe.errors.ProtocolError` for a
response that does not parse).

Each row (:class:`Operation`) names an operation's request and response classes and their
decoders; its module in :mod:`bkframe.proto.ops` has the encoders. The client takes the
class of a request's answer from the row it sends by; the bookie keys its handlers by op
and refuses to start without one for every row. An operation not in the table is answered
BAD_REQUEST by a bookie: a newer client learns the bookie does not know it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import BadMessage, ErrorResponse, Reply, text
from bkframe.proto.codes import MSG_HEADER, Op, Status
from bkframe.proto.frames import pack_message
from bkframe.proto.ops.add import AddRequest, AddResponse, decode_add, decode_add_response
from bkframe.proto.ops.add_batch import AddBatchRequest, AddBatchResponse, decode_add_batch, decode_add_batch_response
from bkframe.proto.ops.bookie_info import (
    BookieInfoRequest,
    BookieInfoResponse,
    decode_bookie_info,
    decode_bookie_info_response,
)
from bkframe.proto.ops.connection_setup import (
    AuthRequest,
    AuthResponse,
    FeaturesRequest,
    FeaturesResponse,
    decode_auth,
    decode_auth_response,
    decode_features,
    decode_features_response,
)
from bkframe.proto.ops.list_entries import (
    ListEntriesRequest,
    ListEntriesResponse,
    decode_list_entries,
    decode_list_entries_response,
)
from bkframe.proto.ops.read import ReadRequest, ReadResponse, decode_read, decode_read_response
from bkframe.proto.ops.read_batch import ReadBatchRequest, ReadBatchResponse, decode_read_batch, decode_read_batch_response
from bkframe.proto.ops.read_lac import ReadLacRequest, ReadLacResponse, decode_read_lac, decode_read_lac_response
from bkframe.proto.ops.subscription import (
    SubCommitRequest,
    SubCommitResponse,
    SubLeaseRequest,
    SubLeaseResponse,
    SubLeaveRequest,
    SubLeaveResponse,
    SubSettleRequest,
    SubSettleResponse,
    SubStatsRequest,
    SubStatsResponse,
    decode_sub_commit,
    decode_sub_commit_response,
    decode_sub_lease,
    decode_sub_lease_response,
    decode_sub_leave,
    decode_sub_leave_response,
    decode_sub_settle,
    decode_sub_settle_response,
    decode_sub_stats,
    decode_sub_stats_response,
)
from bkframe.proto.ops.sync import SyncRequest, SyncResponse, decode_sync, decode_sync_response
from bkframe.proto.ops.write_close import (
    WriteCloseRequest,
    WriteCloseResponse,
    decode_write_close,
    decode_write_close_response,
)
from bkframe.proto.ops.write_lac import WriteLacRequest, WriteLacResponse, decode_write_lac, decode_write_lac_response

Request = (
    AddRequest
    | AddBatchRequest
    | ReadRequest
    | ReadBatchRequest
    | ReadLacRequest
    | SyncRequest
    | WriteLacRequest
    | WriteCloseRequest
    | ListEntriesRequest
    | AuthRequest
    | FeaturesRequest
    | BookieInfoRequest
    | SubLeaseRequest
    | SubSettleRequest
    | SubLeaveRequest
    | SubStatsRequest
)
Response = (
    AddResponse
    | AddBatchResponse
    | ReadResponse
    | ReadBatchResponse
    | ReadLacResponse
    | SyncResponse
    | WriteLacResponse
    | WriteCloseResponse
    | ListEntriesResponse
    | AuthResponse
    | FeaturesResponse
    | BookieInfoResponse
    | SubLeaseResponse
    | SubSettleResponse
    | SubLeaveResponse
    | SubStatsResponse
    | ErrorResponse
)

Q = TypeVar("Q")
P = TypeVar("P", bound=Reply)


@attrs.frozen
class Operation(Generic[Q, P]):
    """One operation: what a request of it decodes to, and what its answer decodes to."""

    op: Op
    request: type[Q]
    response: type[P]
    #: (body, flags, request id, fields start, message end, max entry size) -> request.
    decode_request: Callable[[memoryview, int, int, int, int, int], Q]
    #: (body, status, request id, fields start, message end) -> response.
    decode_response: Callable[[memoryview, Status, int, int, int], P]


# Typed rows, so that a client's request and the class of its answer come from one place.
ADD = Operation(Op.ADD, AddRequest, AddResponse, decode_add, decode_add_response)
ADD_BATCH = Operation(Op.ADD_BATCH, AddBatchRequest, AddBatchResponse, decode_add_batch, decode_add_batch_response)
READ = Operation(Op.READ, ReadRequest, ReadResponse, decode_read, decode_read_response)
READ_BATCH = Operation(Op.READ_BATCH, ReadBatchRequest, ReadBatchResponse, decode_read_batch, decode_read_batch_response)
READ_LAC = Operation(Op.READ_LAC, ReadLacRequest, ReadLacResponse, decode_read_lac, decode_read_lac_response)
SYNC = Operation(Op.SYNC, SyncRequest, SyncResponse, decode_sync, decode_sync_response)
WRITE_LAC = Operation(Op.WRITE_LAC, WriteLacRequest, WriteLacResponse, decode_write_lac, decode_write_lac_response)
WRITE_CLOSE = Operation(Op.WRITE_CLOSE, WriteCloseRequest, WriteCloseResponse, decode_write_close, decode_write_close_response)
LIST_ENTRIES = Operation(
    Op.LIST_ENTRIES, ListEntriesRequest, ListEntriesResponse, decode_list_entries, decode_list_entries_response
)
AUTH = Operation(Op.AUTH, AuthRequest, AuthResponse, decode_auth, decode_auth_response)
FEATURES = Operation(Op.FEATURES, FeaturesRequest, FeaturesResponse, decode_features, decode_features_response)
GET_BOOKIE_INFO = Operation(
    Op.GET_BOOKIE_INFO, BookieInfoRequest, BookieInfoResponse, decode_bookie_info, decode_bookie_info_response
)
SUB_LEASE = Operation(Op.SUB_LEASE, SubLeaseRequest, SubLeaseResponse, decode_sub_lease, decode_sub_lease_response)
SUB_SETTLE = Operation(Op.SUB_SETTLE, SubSettleRequest, SubSettleResponse, decode_sub_settle, decode_sub_settle_response)
SUB_LEAVE = Operation(Op.SUB_LEAVE, SubLeaveRequest, SubLeaveResponse, decode_sub_leave, decode_sub_leave_response)
SUB_STATS = Operation(Op.SUB_STATS, SubStatsRequest, SubStatsResponse, decode_sub_stats, decode_sub_stats_response)
SUB_COMMIT = Operation(
    Op.SUB_COMMIT, SubCommitRequest, SubCommitResponse, decode_sub_commit, decode_sub_commit_response
)

OPERATIONS: dict[int, Operation[Any, Any]] = {
    row.op: row
    for row in (
        ADD,
        ADD_BATCH,
        READ,
        READ_BATCH,
        READ_LAC,
        SYNC,
        WRITE_LAC,
        WRITE_CLOSE,
        LIST_ENTRIES,
        AUTH,
        FEATURES,
        GET_BOOKIE_INFO,
        SUB_LEASE,
        SUB_SETTLE,
        SUB_LEAVE,
        SUB_STATS,
        SUB_COMMIT,
    )
}
_REQUEST_DECODERS = {op: row.decode_request for op, row in OPERATIONS.items()}
_RESPONSE_DECODERS = {op: row.decode_response for op, row in OPERATIONS.items()}
_STATUSES = {int(s): s for s in Status}
_unpack_header = MSG_HEADER.unpack_from
_HEADER_SIZE = MSG_HEADER.size


def decode_requests(body: memoryview, max_entry_size: int) -> list[Request | BadMessage]:
    """Parse every message of a request frame's body.

    A message that does not parse becomes a :class:`BadMessage`; the others are still
    served. A broken message length makes the rest of the frame unparseable, so parsing
    stops there with one BadMessage.
    """
    out: list[Request | BadMessage] = []
    pos = 0
    end = len(body)
    decoders = _REQUEST_DECODERS
    while pos < end:
        if end - pos < _HEADER_SIZE:
            out.append(BadMessage(0, 0, f"truncated message header at byte {pos} of the frame"))
            break
        length, op, flags, request_id = _unpack_header(body, pos)
        msg_end = pos + 4 + length
        if length < _HEADER_SIZE - 4 or msg_end > end:
            out.append(BadMessage(request_id, op, f"message length {length} does not fit the frame"))
            break
        fields_at = pos + _HEADER_SIZE
        pos = msg_end
        decode = decoders.get(op)
        if decode is None:
            out.append(BadMessage(request_id, op, f"unknown op code {op}"))
            continue
        try:
            out.append(decode(body, flags, request_id, fields_at, msg_end, max_entry_size))
        except (struct.error, ProtocolError) as e:
            out.append(BadMessage(request_id, op, str(e)))
    return out


def decode_responses(body: memoryview | bytes) -> list[Response]:
    """Parse every message of a response frame; raises ProtocolError on nonsense."""
    out: list[Response] = []
    pos = 0
    end = len(body)
    view = body if type(body) is memoryview else memoryview(body)
    decoders = _RESPONSE_DECODERS
    while pos < end:
        if end - pos < _HEADER_SIZE:
            raise ProtocolError("truncated response header")
        length, op, status_code, request_id = _unpack_header(view, pos)
        msg_end = pos + 4 + length
        if length < _HEADER_SIZE - 4 or msg_end > end:
            raise ProtocolError(f"response length {length} does not fit the frame")
        at = pos + _HEADER_SIZE
        pos = msg_end
        status = _STATUSES.get(status_code)
        if status is None:
            raise ProtocolError(f"bad response: unknown status {status_code} (op {op}, request {request_id})")
        decode = decoders.get(op)
        if decode is None:
            if op != Op.ERROR:
                raise ProtocolError(f"bad response: unknown op code {op} (request {request_id})")
            out.append(ErrorResponse(request_id, status, text(view, at, msg_end)))
            continue
        try:
            out.append(decode(view, status, request_id, at, msg_end))
        except struct.error as e:
            raise ProtocolError(f"bad {Op(op).name} response: {e}") from None
    return out


def encode_error_response(request_id: int, status: Status, message: str) -> bytes:
    """An ERROR message: a request that could not be parsed or served (request id 0: the
    connection as a whole, which the bookie then closes)."""
    return pack_message(Op.ERROR, status, request_id, message.encode())
