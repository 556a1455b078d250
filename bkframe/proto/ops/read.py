"""READ: one entry (or, with entry id LAST_ENTRY, the last one the bookie holds); with the
FENCE flag it also fences the ledger on that bookie (recovery's first step)."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, text
from bkframe.proto.codes import LAST_ENTRY, MAX_MASTER_KEY, Op, ReadFlag, Status
from bkframe.proto.frames import message_head, pack_message

_FENCE = int(ReadFlag.FENCE)
_FIELDS = struct.Struct("<QqH")  # ledger, entry, key_len (then the key)
_RESPONSE = struct.Struct("<Qqq")  # ledger, entry, lac (then the entry, or a message)


@attrs.frozen
class ReadRequest(LedgerRequest):
    entry_id: int
    master_key: bytes = b""
    fence: bool = False


@attrs.frozen
class ReadResponse(LedgerReply):
    op: ClassVar[Op] = Op.READ
    entry_id: int = -1
    #: The bookie's LAC of the ledger.
    lac: int = -1
    #: The entry (status OK).
    data: bytes = b""


def encode_read(request_id: int, ledger_id: int, entry_id: int, *, master_key: bytes = b"", fence: bool = False) -> bytes:
    flags = _FENCE if fence else 0
    return pack_message(Op.READ, flags, request_id, _FIELDS.pack(ledger_id, entry_id, len(master_key)), master_key)


def decode_read(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> ReadRequest:
    ledger_id, entry_id, key_len = _FIELDS.unpack_from(body, at)
    if flags & ~_FENCE:
        raise ProtocolError(f"unknown READ flags {flags:#x}")
    key_at = at + _FIELDS.size
    if key_len > MAX_MASTER_KEY or key_at + key_len != end:
        raise ProtocolError(f"READ master key length {key_len} does not match the message")
    if entry_id < LAST_ENTRY:
        raise ProtocolError(f"READ entry id {entry_id} is invalid")
    check_ledger("READ", ledger_id)
    return ReadRequest(request_id, ledger_id, entry_id, bytes(body[key_at:end]), bool(flags & _FENCE))


def encode_read_response(
    request_id: int, status: Status, ledger_id: int, entry_id: int, lac: int, payload: Buffer = b""
) -> list[Buffer]:
    """Parts of a READ response; ``payload`` is the entry (OK) or a UTF-8 message."""
    head = message_head(_RESPONSE.size + len(payload), Op.READ, status, request_id)
    return [head + _RESPONSE.pack(ledger_id, entry_id, lac), payload]


def decode_read_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> ReadResponse:
    ledger_id, entry_id, lac = _RESPONSE.unpack_from(body, at)
    at += _RESPONSE.size
    if status == Status.OK:
        return ReadResponse(request_id, status, "", ledger_id, entry_id, lac, bytes(body[at:end]))
    return ReadResponse(request_id, status, text(body, at, end), ledger_id, entry_id, lac)
