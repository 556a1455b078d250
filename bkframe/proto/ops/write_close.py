"""WRITE_CLOSE (BP-32's advisory write close): the writer is done with the ledger."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, fixed_reply, keyed_request
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<QH")  # ledger, key_len (then the key)
_RESPONSE = struct.Struct("<Q")  # ledger (then a message)


@attrs.frozen
class WriteCloseRequest(LedgerRequest):
    master_key: bytes


@attrs.frozen
class WriteCloseResponse(LedgerReply):
    op: ClassVar[Op] = Op.WRITE_CLOSE


def encode_write_close(request_id: int, ledger_id: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_CLOSE, 0, request_id, _FIELDS.pack(ledger_id, len(master_key)), master_key)


def decode_write_close(
    body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> WriteCloseRequest:
    (ledger_id,), key = keyed_request("WRITE_CLOSE", _FIELDS, body, flags, at, end)
    check_ledger("WRITE_CLOSE", ledger_id)
    return WriteCloseRequest(request_id, ledger_id, key)


def encode_write_close_response(request_id: int, status: Status, ledger_id: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_CLOSE, status, request_id, _RESPONSE.pack(ledger_id), message.encode())


def decode_write_close_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> WriteCloseResponse:
    return fixed_reply(WriteCloseResponse, _RESPONSE, body, status, request_id, at, end)
