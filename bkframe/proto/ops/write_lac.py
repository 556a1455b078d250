"""WRITE_LAC: an explicit LAC from the writer, answered once journaled and synced."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.proto.base import LedgerReply, LedgerRequest, check_lac, check_ledger, fixed_reply, keyed_request
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<QqH")  # ledger, lac, key_len (then the key)
_RESPONSE = struct.Struct("<Qq")  # ledger, the bookie's lac after the write (then a message)


@attrs.frozen
class WriteLacRequest(LedgerRequest):
    lac: int
    master_key: bytes


@attrs.frozen
class WriteLacResponse(LedgerReply):
    op: ClassVar[Op] = Op.WRITE_LAC
    #: The bookie's LAC after the write.
    lac: int = -1


def encode_write_lac(request_id: int, ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_LAC, 0, request_id, _FIELDS.pack(ledger_id, lac, len(master_key)), master_key)


def decode_write_lac(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> WriteLacRequest:
    (ledger_id, lac), key = keyed_request("WRITE_LAC", _FIELDS, body, flags, at, end)
    check_ledger("WRITE_LAC", ledger_id)
    check_lac("WRITE_LAC", lac)
    return WriteLacRequest(request_id, ledger_id, lac, key)


def encode_write_lac_response(request_id: int, status: Status, ledger_id: int, lac: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_LAC, status, request_id, _RESPONSE.pack(ledger_id, lac), message.encode())


def decode_write_lac_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> WriteLacResponse:
    return fixed_reply(WriteLacResponse, _RESPONSE, body, status, request_id, at, end)
