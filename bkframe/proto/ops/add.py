"""ADD: one entry of a ledger. Ledger recovery writes entries back with it (RECOVERY flag),
one entry a request; writers send theirs as ADD_BATCH, a single entry as a one-entry batch."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_entry_size, check_lac, check_ledger, fixed_reply
from bkframe.proto.codes import MAX_MASTER_KEY, AddFlag, Op, Status
from bkframe.proto.frames import message_head, pack_message

_RECOVERY = int(AddFlag.RECOVERY)
_FIELDS = struct.Struct("<QqqHH")  # ledger, entry, lac, ledger_type, key_len (then key, entry)
_RESPONSE = struct.Struct("<Qqq")  # ledger, entry, last_add_synced (then a message)


@attrs.frozen
class AddRequest(LedgerRequest):
    entry_id: int
    lac: int
    ledger_type: int
    master_key: bytes
    data: memoryview
    recovery: bool = False


@attrs.frozen
class AddResponse(LedgerReply):
    op: ClassVar[Op] = Op.ADD
    entry_id: int = -1
    #: The bookie's LastAddSynced for the ledger (VD ledgers: what is fsynced).
    last_add_synced: int = -1


def encode_add(
    request_id: int,
    ledger_id: int,
    entry_id: int,
    lac: int,
    ledger_type: int,
    master_key: bytes,
    data: Buffer,
    *,
    recovery: bool = False,
) -> list[Buffer]:
    """The parts of one ADD message (data is not copied)."""
    size = _FIELDS.size + len(master_key) + len(data)
    head = message_head(size, Op.ADD, _RECOVERY if recovery else 0, request_id)
    return [head + _FIELDS.pack(ledger_id, entry_id, lac, ledger_type, len(master_key)) + master_key, data]


def decode_add(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> AddRequest:
    if end - at < _FIELDS.size:
        raise ProtocolError("ADD message too short")
    ledger_id, entry_id, lac, ledger_type, key_len = _FIELDS.unpack_from(body, at)
    if flags & ~_RECOVERY:
        raise ProtocolError(f"unknown ADD flags {flags:#x}")
    key_at = at + _FIELDS.size
    data_at = key_at + key_len
    if key_len > MAX_MASTER_KEY or data_at > end:
        raise ProtocolError(f"ADD master key length {key_len} is invalid (at most {MAX_MASTER_KEY})")
    if entry_id < 0:
        raise ProtocolError(f"ADD entry id {entry_id} is negative")
    check_ledger("ADD", ledger_id)
    check_lac("ADD", lac)
    check_entry_size(end - data_at, max_entry_size)
    return AddRequest(
        request_id, ledger_id, entry_id, lac, ledger_type, bytes(body[key_at:data_at]), body[data_at:end], bool(flags & _RECOVERY)
    )


def encode_add_response(
    request_id: int, status: Status, ledger_id: int, entry_id: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    return pack_message(Op.ADD, status, request_id, _RESPONSE.pack(ledger_id, entry_id, last_add_synced), message.encode())


def decode_add_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> AddResponse:
    return fixed_reply(AddResponse, _RESPONSE, body, status, request_id, at, end)
