"""WRITE_CLOSE (BP-32's advisory write close): the writer is done with the ledger."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, check_ledger, text
from bkframe.proto.codes import MAX_MASTER_KEY, Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<QH")  # ledger, key_len (then the key)
_RESPONSE = struct.Struct("<Q")  # ledger (then a message)


@attrs.frozen
class WriteCloseRequest:
    request_id: int
    ledger_id: int
    master_key: bytes


@attrs.frozen
class WriteCloseResponse(Reply):
    op: ClassVar[Op] = Op.WRITE_CLOSE
    ledger_id: int = 0


def encode_write_close(request_id: int, ledger_id: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_CLOSE, 0, request_id, _FIELDS.pack(ledger_id, len(master_key)), master_key)


def decode_write_close(
    body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> WriteCloseRequest:
    ledger_id, key_len = _FIELDS.unpack_from(body, at)
    key_at = at + _FIELDS.size
    if flags or key_len > MAX_MASTER_KEY or key_at + key_len != end:
        raise ProtocolError("WRITE_CLOSE message has the wrong length, key length or unknown flags")
    check_ledger("WRITE_CLOSE", ledger_id)
    return WriteCloseRequest(request_id, ledger_id, bytes(body[key_at:end]))


def encode_write_close_response(request_id: int, status: Status, ledger_id: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_CLOSE, status, request_id, _RESPONSE.pack(ledger_id), message.encode())


def decode_write_close_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> WriteCloseResponse:
    (ledger_id,) = _RESPONSE.unpack_from(body, at)
    return WriteCloseResponse(request_id, status, text(body, at + _RESPONSE.size, end), ledger_id)
