"""Responses to bytes and back: the encoders bookies use, and :func:`decode_responses`, which
clients use and which raises :class:`ProtocolError` for a response that does not parse.
Encoders return whole messages, or their parts, so that entry data is never copied. Frames
and message headers: :mod:`.codec`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from bkframe.core.interfaces import Buffer
from bkframe.proto.codec import pack_message
from bkframe.proto.messages import BATCH_DIRECTORY, MSG_HEADER, BatchEntries, Op, ProtocolError, Response, Status

_ADD_RESP = struct.Struct("<Qqq")  # ledger, entry, last_add_synced
_READ_RESP = struct.Struct("<Qqq")  # ledger, entry, lac
_READ_LAC_RESP = struct.Struct("<Qqq")  # ledger, lac, last_entry
_SYNC_RESP = struct.Struct("<Qq")  # ledger, last_add_synced
_WRITE_LAC_RESP = struct.Struct("<Qq")  # ledger, the bookie's lac after the write
_WRITE_CLOSE_RESP = struct.Struct("<Q")  # ledger
_LIST_ENTRIES_RESP = struct.Struct("<QBqI")  # ledger, limbo, next first (-1: done), run count
_RUN = np.dtype([("first", "<i8"), ("last", "<i8")])
_ADD_BATCH_RESP = struct.Struct("<QIq")  # ledger, count, last_add_synced
_READ_BATCH_RESP = struct.Struct("<QqI")  # ledger, lac, count (then directory, entries, message)
_FEATURES_RESP = struct.Struct("<I")  # the feature bits the bookie will use


def encode_add_response(
    request_id: int, status: Status, ledger_id: int, entry_id: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    return pack_message(Op.ADD, status, request_id, _ADD_RESP.pack(ledger_id, entry_id, last_add_synced), message.encode())


def encode_read_response(
    request_id: int, status: Status, ledger_id: int, entry_id: int, lac: int, payload: Buffer = b""
) -> list[Buffer]:
    """Parts of a READ response; ``payload`` is the entry (OK) or a UTF-8 message."""
    head = MSG_HEADER.pack(10 + _READ_RESP.size + len(payload), Op.READ, status, request_id) + _READ_RESP.pack(
        ledger_id, entry_id, lac
    )
    return [head, payload]


def encode_read_lac_response(
    request_id: int, status: Status, ledger_id: int, lac: int, last_entry: int, message: str = ""
) -> bytes:
    return pack_message(Op.READ_LAC, status, request_id, _READ_LAC_RESP.pack(ledger_id, lac, last_entry), message.encode())


def encode_add_batch_response(
    request_id: int, status: Status, ledger_id: int, count: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    """One status for the whole batch: its entries are stored together or not at all."""
    return pack_message(
        Op.ADD_BATCH, status, request_id, _ADD_BATCH_RESP.pack(ledger_id, count, last_add_synced), message.encode()
    )


def encode_sync_response(request_id: int, status: Status, ledger_id: int, last_add_synced: int, message: str = "") -> bytes:
    return pack_message(Op.SYNC, status, request_id, _SYNC_RESP.pack(ledger_id, last_add_synced), message.encode())


def encode_write_lac_response(request_id: int, status: Status, ledger_id: int, lac: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_LAC, status, request_id, _WRITE_LAC_RESP.pack(ledger_id, lac), message.encode())


def encode_write_close_response(request_id: int, status: Status, ledger_id: int, message: str = "") -> bytes:
    return pack_message(Op.WRITE_CLOSE, status, request_id, _WRITE_CLOSE_RESP.pack(ledger_id), message.encode())


def encode_list_entries_response(
    request_id: int,
    status: Status,
    ledger_id: int,
    *,
    limbo: bool = False,
    next_first: int = -1,
    runs: Sequence[tuple[int, int]] = (),
    message: str = "",
) -> bytes:
    """``runs``: inclusive ``(first, last)`` ranges of held entries, ascending."""
    table = np.array(list(runs), dtype=np.int64).reshape(-1, 2).tobytes() if runs else b""
    head = _LIST_ENTRIES_RESP.pack(ledger_id, limbo, next_first, len(runs))
    return pack_message(Op.LIST_ENTRIES, status, request_id, head, table, message.encode())


def encode_read_batch_response(
    request_id: int,
    status: Status,
    ledger_id: int,
    lac: int,
    entry_ids: Sequence[int] = (),
    entries: Sequence[Buffer] = (),
    message: str = "",
) -> list[Buffer]:
    """Parts of a READ_BATCH response (entries are not copied)."""
    directory = np.empty(len(entry_ids), dtype=BATCH_DIRECTORY)
    directory["entry_id"] = entry_ids
    directory["length"] = [len(e) for e in entries]
    text = message.encode()
    size = 10 + _READ_BATCH_RESP.size + directory.nbytes + int(directory["length"].sum()) + len(text)
    head = MSG_HEADER.pack(size, Op.READ_BATCH, status, request_id) + _READ_BATCH_RESP.pack(
        ledger_id, lac, len(entry_ids)
    )
    return [head + directory.tobytes(), *entries, text]


def encode_auth_response(request_id: int, status: Status, message: str) -> bytes:
    """OK with the principal, or UNAUTHORIZED with why (never the credential)."""
    return pack_message(Op.AUTH, status, request_id, message.encode())


def encode_features_response(request_id: int, features: int) -> bytes:
    """OK with the feature bits this bookie will use on the connection."""
    return pack_message(Op.FEATURES, Status.OK, request_id, _FEATURES_RESP.pack(features))


def encode_bookie_info_response(request_id: int, info: dict[str, Any]) -> bytes:
    return pack_message(Op.GET_BOOKIE_INFO, Status.OK, request_id, json.dumps(info, sort_keys=True).encode())


def encode_error_response(request_id: int, status: Status, message: str) -> bytes:
    return pack_message(Op.ERROR, status, request_id, message.encode())


def decode_responses(body: bytes) -> list[Response]:
    """Parse every message of a response frame; raises ProtocolError on nonsense."""
    out = []
    pos = 0
    end = len(body)
    while pos < end:
        if end - pos < MSG_HEADER.size:
            raise ProtocolError("truncated response header")
        length, op, status_code, request_id = MSG_HEADER.unpack_from(body, pos)
        msg_end = pos + 4 + length
        if length < 10 or msg_end > end:
            raise ProtocolError(f"response length {length} does not fit the frame")
        at = pos + MSG_HEADER.size
        pos = msg_end
        try:
            status = Status(status_code)
            out.append(_decode_response(body, Op(op), status, request_id, at, msg_end))
        except (ValueError, struct.error) as e:
            raise ProtocolError(f"bad response: {e}") from None
    return out


def _decode_response(body: bytes, op: Op, status: Status, request_id: int, at: int, end: int) -> Response:
    if op == Op.ADD:
        ledger_id, entry_id, las = _ADD_RESP.unpack_from(body, at)
        msg = body[at + _ADD_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, entry_id, las, message=msg)
    if op == Op.READ:
        ledger_id, entry_id, lac = _READ_RESP.unpack_from(body, at)
        payload = body[at + _READ_RESP.size : end]
        if status == Status.OK:
            return Response(op, status, request_id, ledger_id, entry_id, lac, data=payload)
        return Response(op, status, request_id, ledger_id, entry_id, lac, message=payload.decode(errors="replace"))
    if op == Op.READ_LAC:
        ledger_id, lac, last = _READ_LAC_RESP.unpack_from(body, at)
        msg = body[at + _READ_LAC_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=lac, last_entry=last, message=msg)
    if op == Op.ADD_BATCH:
        ledger_id, count, las = _ADD_BATCH_RESP.unpack_from(body, at)
        msg = body[at + _ADD_BATCH_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=las, last_entry=count, message=msg)
    if op == Op.SYNC:
        ledger_id, las = _SYNC_RESP.unpack_from(body, at)
        msg = body[at + _SYNC_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=las, message=msg)
    if op == Op.WRITE_LAC:
        ledger_id, lac = _WRITE_LAC_RESP.unpack_from(body, at)
        msg = body[at + _WRITE_LAC_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=lac, message=msg)
    if op == Op.WRITE_CLOSE:
        (ledger_id,) = _WRITE_CLOSE_RESP.unpack_from(body, at)
        msg = body[at + _WRITE_CLOSE_RESP.size : end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, message=msg)
    if op == Op.LIST_ENTRIES:
        ledger_id, limbo, next_first, count = _LIST_ENTRIES_RESP.unpack_from(body, at)
        table_at = at + _LIST_ENTRIES_RESP.size
        table_end = table_at + count * _RUN.itemsize
        if table_end > end:
            raise ProtocolError("LIST_ENTRIES response is shorter than its run count")
        runs = np.frombuffer(body, dtype=_RUN, count=count, offset=table_at)
        pairs = tuple(zip(runs["first"].tolist(), runs["last"].tolist()))
        msg = body[table_end:end].decode(errors="replace")
        return Response(
            op, status, request_id, ledger_id, message=msg, runs=pairs, next_first=next_first, limbo=bool(limbo)
        )
    if op == Op.READ_BATCH:
        ledger_id, lac, count = _READ_BATCH_RESP.unpack_from(body, at)
        dir_at = at + _READ_BATCH_RESP.size
        data_at = dir_at + count * BATCH_DIRECTORY.itemsize
        if data_at > end:
            raise ProtocolError("READ_BATCH response is shorter than its entry count")
        directory = np.frombuffer(body, dtype=BATCH_DIRECTORY, count=count, offset=dir_at)
        # Where each entry is, as arrays: no object per entry (see BatchEntries).
        ends = np.cumsum(directory["length"], dtype=np.int64) + data_at
        pos = int(ends[-1]) if count else data_at
        if pos > end:
            raise ProtocolError("READ_BATCH response entry lengths overrun the message")
        starts = ends - directory["length"]
        ids = directory["entry_id"].astype(np.int64)
        batch = BatchEntries(ids, starts, ends, body) if count else None
        msg = body[pos:end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=lac, message=msg, batch=batch)
    if op == Op.GET_BOOKIE_INFO:
        return Response(op, status, request_id, info=json.loads(body[at:end]))
    if op == Op.FEATURES and status == Status.OK:
        (features,) = _FEATURES_RESP.unpack_from(body, at)
        return Response(op, status, request_id, features=features)
    return Response(op, status, request_id, message=body[at:end].decode(errors="replace"))


__all__ = [
    "decode_responses",
    "encode_add_batch_response",
    "encode_add_response",
    "encode_auth_response",
    "encode_bookie_info_response",
    "encode_error_response",
    "encode_features_response",
    "encode_list_entries_response",
    "encode_read_batch_response",
    "encode_read_lac_response",
    "encode_read_response",
    "encode_sync_response",
    "encode_write_close_response",
    "encode_write_lac_response",
]
