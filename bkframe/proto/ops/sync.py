"""SYNC (BP-14's force): the bookie makes what it holds of a ledger durable and answers its
LastAddSynced."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs

from bkframe.proto.base import LedgerReply, LedgerRequest, check_ledger, fixed_reply, fixed_request
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message

_FIELDS = struct.Struct("<Q")  # ledger
_RESPONSE = struct.Struct("<Qq")  # ledger, last_add_synced (then a message)


@attrs.frozen
class SyncRequest(LedgerRequest):
    """Make what the bookie holds of the ledger durable."""


@attrs.frozen
class SyncResponse(LedgerReply):
    op: ClassVar[Op] = Op.SYNC
    last_add_synced: int = -1


def encode_sync(request_id: int, ledger_id: int) -> bytes:
    return pack_message(Op.SYNC, 0, request_id, _FIELDS.pack(ledger_id))


def decode_sync(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SyncRequest:
    (ledger_id,) = fixed_request("SYNC", _FIELDS, body, flags, at, end)
    check_ledger("SYNC", ledger_id)
    return SyncRequest(request_id, ledger_id)


def encode_sync_response(request_id: int, status: Status, ledger_id: int, last_add_synced: int, message: str = "") -> bytes:
    return pack_message(Op.SYNC, status, request_id, _RESPONSE.pack(ledger_id, last_add_synced), message.encode())


def decode_sync_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SyncResponse:
    return fixed_reply(SyncResponse, _RESPONSE, body, status, request_id, at, end)
