"""ADD_BATCH: many entries of one ledger in one message, with one status for all (they are
stored together or not at all): the add path's fast lane."""

from __future__ import annotations

import struct
from typing import ClassVar

import attrs
import numpy as np

from bkframe.core.interfaces import Buffer
from bkframe.errors import ProtocolError
from bkframe.proto.base import LedgerReply, LedgerRequest, check_entry_size, check_lac, check_ledger, fixed_reply
from bkframe.proto.codes import BATCH_DIRECTORY, MAX_MASTER_KEY, AddFlag, Op, Status
from bkframe.proto.frames import message_head, pack_message

_RECOVERY = int(AddFlag.RECOVERY)
_FIELDS = struct.Struct("<QqHHI")  # ledger, lac, ledger_type, key_len, count (then key, directory, entries)
#: One row of BATCH_DIRECTORY (entry id, length), for the one-entry fast path.
_ONE_ENTRY = struct.Struct("<qI")
assert _ONE_ENTRY.size == BATCH_DIRECTORY.itemsize
_RESPONSE = struct.Struct("<QIq")  # ledger, count, last_add_synced (then a message)


@attrs.frozen
class AddBatchRequest(LedgerRequest):
    lac: int
    ledger_type: int
    master_key: bytes
    entry_ids: list[int]
    entries: list[memoryview]
    recovery: bool = False


@attrs.frozen
class AddBatchResponse(LedgerReply):
    op: ClassVar[Op] = Op.ADD_BATCH
    #: How many entries the answer covers (all of the request's).
    count: int = 0
    #: The bookie's LastAddSynced for the ledger (VD ledgers: what is fsynced).
    last_add_synced: int = -1


def encode_add_batch(
    request_id: int,
    ledger_id: int,
    lac: int,
    ledger_type: int,
    master_key: bytes,
    entry_ids: list[int],
    entries: list[Buffer],
    *,
    recovery: bool = False,
) -> list[Buffer]:
    """The parts of one ADD_BATCH message (entries are not copied)."""
    if len(entry_ids) == 1:
        # One entry (one append in flight): struct is far cheaper than numpy for one row.
        table = _ONE_ENTRY.pack(entry_ids[0], len(entries[0]))
        data_size = len(entries[0])
    else:
        directory = np.empty(len(entry_ids), dtype=BATCH_DIRECTORY)
        directory["entry_id"] = entry_ids
        directory["length"] = [len(e) for e in entries]
        table = directory.tobytes()
        data_size = int(directory["length"].sum())
    size = _FIELDS.size + len(master_key) + len(table) + data_size
    head = message_head(size, Op.ADD_BATCH, _RECOVERY if recovery else 0, request_id)
    fields = _FIELDS.pack(ledger_id, lac, ledger_type, len(master_key), len(entry_ids))
    return [head + fields + master_key + table, *entries]


def decode_add_batch(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> AddBatchRequest:
    ledger_id, lac, ledger_type, key_len, count = _FIELDS.unpack_from(body, at)
    if flags & ~_RECOVERY:
        raise ProtocolError(f"unknown ADD_BATCH flags {flags:#x}")
    key_at = at + _FIELDS.size
    dir_at = key_at + key_len
    data_at = dir_at + count * BATCH_DIRECTORY.itemsize
    if key_len > MAX_MASTER_KEY or count == 0 or data_at > end:
        raise ProtocolError(f"ADD_BATCH with key length {key_len} and {count} entries does not fit its message")
    if count == 1:
        entry_id, length = _ONE_ENTRY.unpack_from(body, dir_at)
        entry_ids = [entry_id]
        lengths = [length]
    else:
        directory = np.frombuffer(body, dtype=BATCH_DIRECTORY, count=count, offset=dir_at)
        lengths = directory["length"].tolist()
        entry_ids = directory["entry_id"].tolist()
    if data_at + sum(lengths) != end:
        raise ProtocolError("ADD_BATCH entry lengths do not add up to the message")
    check_entry_size(max(lengths), max_entry_size)
    if min(entry_ids) < 0:
        raise ProtocolError(f"ADD_BATCH entry id {min(entry_ids)} is negative")
    check_ledger("ADD_BATCH", ledger_id)
    check_lac("ADD_BATCH", lac)
    entries = []
    pos = data_at
    for length in lengths:
        entries.append(body[pos : pos + length])
        pos += length
    return AddBatchRequest(
        request_id, ledger_id, lac, ledger_type, bytes(body[key_at:dir_at]), entry_ids, entries, bool(flags & _RECOVERY)
    )


def encode_add_batch_response(
    request_id: int, status: Status, ledger_id: int, count: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    return pack_message(Op.ADD_BATCH, status, request_id, _RESPONSE.pack(ledger_id, count, last_add_synced), message.encode())


def decode_add_batch_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> AddBatchResponse:
    return fixed_reply(AddBatchResponse, _RESPONSE, body, status, request_id, at, end)
