"""WRITE_LAC: an explicit LAC from the writer, answered once journaled and synced."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, check_lac, check_ledger, text
from bkframe.proto.codes import MAX_MASTER_KEY, Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<QqH")  # ledger, lac, key_len (then the key)
_RESPONSE = struct.Struct("<Qq")  # ledger, the bookie's lac after the write (then a message)


@attrs.frozen
class WriteLacRequest:
    request_id: int
    ledger_id: int
    lac: int
    master_key: bytes


@attrs.frozen
class WriteLacResponse(Reply):
    op: ClassVar[Op] = Op.WRITE_LAC
    ledger_id: int = 0
    #: The bookie's LAC after the write.
    lac: int = -1


def encode_write_lac(request_id: int, ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_LAC, 0, request_id, _FIELDS.pack(ledger_id, lac, len(master_key)), master_key)


def decode_write_lac(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> WriteLacRequest:
    ledger_id, lac, key_len = _FIELDS.unpack_from(body, at)
    key_at = at + _FIELDS.size
    if flags or key_len > MAX_MASTER_KEY or key_at + key_len != end:
        raise ProtocolError("WRITE_LAC message has the wrong length, key length or unknown flags")
    check_ledger("WRITE_LAC", ledger_id)
    check_lac("WRITE_LAC", lac)
    return WriteLacRequest(request_id, ledger_id, lac, bytes(body[key_at:end]))


def encode_write_lac_response(request_id: int, status: Status, ledger_id: int, lac: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_LAC, status, request_id, _RESPONSE.pack(ledger_id, lac), message.encode())


def decode_write_lac_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> WriteLacResponse:
    ledger_id, lac = _RESPONSE.unpack_from(body, at)
    return WriteLacResponse(request_id, status, text(body, at + _RESPONSE.size, end), ledger_id, lac)
