"""SYNC (BP-14's force): the bookie makes what it holds of a ledger durable and answers its
LastAddSynced."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, check_ledger, text
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<Q")  # ledger
_RESPONSE = struct.Struct("<Qq")  # ledger, last_add_synced (then a message)


@attrs.frozen
class SyncRequest:
    request_id: int
    ledger_id: int


@attrs.frozen
class SyncResponse(Reply):
    op: ClassVar[Op] = Op.SYNC
    ledger_id: int = 0
    last_add_synced: int = -1


def encode_sync(request_id: int, ledger_id: int) -> bytes:
    return pack_message(Op.SYNC, 0, request_id, _FIELDS.pack(ledger_id))


def decode_sync(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SyncRequest:
    if flags or end - at != _FIELDS.size:
        raise ProtocolError("SYNC message has the wrong length or unknown flags")
    (ledger_id,) = _FIELDS.unpack_from(body, at)
    check_ledger("SYNC", ledger_id)
    return SyncRequest(request_id, ledger_id)


def encode_sync_response(request_id: int, status: Status, ledger_id: int, last_add_synced: int, message: str = "") -> bytes:
    return pack_message(Op.SYNC, status, request_id, _RESPONSE.pack(ledger_id, last_add_synced), message.encode())


def decode_sync_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SyncResponse:
    ledger_id, las = _RESPONSE.unpack_from(body, at)
    return SyncResponse(request_id, status, text(body, at + _RESPONSE.size, end), ledger_id, las)
