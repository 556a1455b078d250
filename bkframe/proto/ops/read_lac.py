"""READ_LAC: a ledger's LAC on a bookie and the last entry it holds; with the LONG_POLL flag
the bookie holds the answer until its LAC passes ``previous_lac`` or the timeout ends."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, fixed_reply
from bkframe.proto.codes import Op, ReadLacFlag, Status
from bkframe.proto.frames import pack_message

_LONG_POLL_FLAG = int(ReadLacFlag.LONG_POLL)
_FIELDS = struct.Struct("<Q")  # ledger
_LONG_POLL = struct.Struct("<qI")  # previous lac, timeout ms (with ReadLacFlag.LONG_POLL)
_RESPONSE = struct.Struct("<Qqq")  # ledger, lac, last_entry (then a message)


@attrs.frozen
class ReadLacRequest(LedgerRequest):
    #: Long poll: answer once the LAC is above this (None: answer at once).
    previous_lac: int | None = None
    timeout_ms: int = 0


@attrs.frozen
class ReadLacResponse(LedgerReply):
    op: ClassVar[Op] = Op.READ_LAC
    lac: int = -1
    #: The last entry the bookie holds.
    last_entry: int = -1


def encode_read_lac(request_id: int, ledger_id: int, *, previous_lac: int | None = None, timeout_ms: int = 0) -> bytes:
    if previous_lac is None:
        return pack_message(Op.READ_LAC, 0, request_id, _FIELDS.pack(ledger_id))
    poll = _LONG_POLL.pack(previous_lac, timeout_ms)
    return pack_message(Op.READ_LAC, _LONG_POLL_FLAG, request_id, _FIELDS.pack(ledger_id), poll)


def decode_read_lac(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> ReadLacRequest:
    (ledger_id,) = _FIELDS.unpack_from(body, at)
    check_ledger("READ_LAC", ledger_id)
    if flags == _LONG_POLL_FLAG and end - at == _FIELDS.size + _LONG_POLL.size:
        previous, timeout_ms = _LONG_POLL.unpack_from(body, at + _FIELDS.size)
        return ReadLacRequest(request_id, ledger_id, previous, timeout_ms)
    if flags != 0 or end - at != _FIELDS.size:
        raise ProtocolError("READ_LAC message has the wrong length or unknown flags")
    return ReadLacRequest(request_id, ledger_id)


def encode_read_lac_response(
    request_id: int, status: Status, ledger_id: int, lac: int, last_entry: int, message: str = ""
) -> bytes:
    return pack_message(Op.READ_LAC, status, request_id, _RESPONSE.pack(ledger_id, lac, last_entry), message.encode())


def decode_read_lac_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> ReadLacResponse:
    return fixed_reply(ReadLacResponse, _RESPONSE, body, status, request_id, at, end)
