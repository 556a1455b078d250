"""The wire protocol's encoding: messages and frames to bytes and back (see :mod:`.messages`
for what the codes mean, ``docs/protocol.md`` for every byte).

Encoders return whole messages (or their parts, so that entry data is never copied);
:func:`decode_requests` never raises for bad input (a message that does not parse becomes
a :class:`BadMessage`), while :func:`decode_responses` raises :class:`ProtocolError`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from bkframe.core.interfaces import Buffer
from bkframe.core.proto.messages import (
    BATCH_DIRECTORY,
    FRAME_HEADER,
    LAST_ENTRY,
    MAX_AUTH_CREDENTIAL,
    MAX_AUTH_METHOD,
    MAX_LEDGER_ID,
    MAX_MASTER_KEY,
    MAX_READ_BATCH,
    MSG_HEADER,
    AddBatchRequest,
    AddFlag,
    AddRequest,
    AuthRequest,
    BadMessage,
    BookieInfoRequest,
    ListEntriesRequest,
    Op,
    ProtocolError,
    ReadBatchRequest,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    Request,
    Response,
    Status,
    SyncRequest,
    WriteCloseRequest,
    WriteLacRequest,
)

_RECOVERY = int(AddFlag.RECOVERY)
_FENCE = int(ReadFlag.FENCE)

_ADD = struct.Struct("<QqqHH")  # ledger, entry, lac, ledger_type, key_len
_READ = struct.Struct("<QqH")  # ledger, entry, key_len
_READ_LAC = struct.Struct("<Q")  # ledger
_LONG_POLL = struct.Struct("<qI")  # previous lac, timeout ms (with ReadLacFlag.LONG_POLL)
_ADD_RESP = struct.Struct("<Qqq")  # ledger, entry, last_add_synced
_READ_RESP = struct.Struct("<Qqq")  # ledger, entry, lac
_READ_LAC_RESP = struct.Struct("<Qqq")  # ledger, lac, last_entry
_SYNC = struct.Struct("<Q")  # ledger
_SYNC_RESP = struct.Struct("<Qq")  # ledger, last_add_synced
_WRITE_LAC = struct.Struct("<QqH")  # ledger, lac, key_len
_WRITE_LAC_RESP = struct.Struct("<Qq")  # ledger, the bookie's lac after the write
_WRITE_CLOSE = struct.Struct("<QH")  # ledger, key_len
_WRITE_CLOSE_RESP = struct.Struct("<Q")  # ledger
_LIST_ENTRIES = struct.Struct("<Qqq")  # ledger, first, last
_LIST_ENTRIES_RESP = struct.Struct("<QBqI")  # ledger, limbo, next first (-1: done), run count
_RUN = np.dtype([("first", "<i8"), ("last", "<i8")])
#: One row of BATCH_DIRECTORY (entry id, length), for the one-entry fast path.
_ONE_ENTRY_DIRECTORY = struct.Struct("<qI")
assert _ONE_ENTRY_DIRECTORY.size == BATCH_DIRECTORY.itemsize
_ADD_BATCH = struct.Struct("<QqHHI")  # ledger, lac, ledger_type, key_len, count
_ADD_BATCH_RESP = struct.Struct("<QIq")  # ledger, count, last_add_synced
_READ_BATCH = struct.Struct("<QqqII")  # ledger, first, last, max bytes, step
_AUTH = struct.Struct("<HI")  # method length, credential length (then both)
_READ_BATCH_RESP = struct.Struct("<QqI")  # ledger, lac, count (then directory, entries, message)


def _message(op: Op, flags_or_status: int, request_id: int, *fields: Buffer) -> bytes:
    """One whole message: header (length, op, flags or status, request id), then fields."""
    body = b"".join(fields)
    return MSG_HEADER.pack(MSG_HEADER.size - 4 + len(body), op, flags_or_status, request_id) + body


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
    rest = _ADD.size + len(master_key) + len(data)
    flags = _RECOVERY if recovery else 0
    head = MSG_HEADER.pack(rest + 10, Op.ADD, flags, request_id) + _ADD.pack(
        ledger_id, entry_id, lac, ledger_type, len(master_key)
    )
    return [head + master_key, data]


def encode_read(
    request_id: int, ledger_id: int, entry_id: int, *, master_key: bytes = b"", fence: bool = False
) -> bytes:
    flags = ReadFlag.FENCE if fence else 0
    return _message(Op.READ, flags, request_id, _READ.pack(ledger_id, entry_id, len(master_key)), master_key)


def encode_read_lac(
    request_id: int, ledger_id: int, *, previous_lac: int | None = None, timeout_ms: int = 0
) -> bytes:
    if previous_lac is None:
        return _message(Op.READ_LAC, 0, request_id, _READ_LAC.pack(ledger_id))
    poll = _LONG_POLL.pack(previous_lac, timeout_ms)
    return _message(Op.READ_LAC, ReadLacFlag.LONG_POLL, request_id, _READ_LAC.pack(ledger_id), poll)


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
        table = _ONE_ENTRY_DIRECTORY.pack(entry_ids[0], len(entries[0]))
        data_size = len(entries[0])
    else:
        directory = np.empty(len(entry_ids), dtype=BATCH_DIRECTORY)
        directory["entry_id"] = entry_ids
        directory["length"] = [len(e) for e in entries]
        table = directory.tobytes()
        data_size = int(directory["length"].sum())
    size = 10 + _ADD_BATCH.size + len(master_key) + len(table) + data_size
    head = MSG_HEADER.pack(size, Op.ADD_BATCH, _RECOVERY if recovery else 0, request_id) + _ADD_BATCH.pack(
        ledger_id, lac, ledger_type, len(master_key), len(entry_ids)
    )
    return [head + master_key + table, *entries]


def encode_sync(request_id: int, ledger_id: int) -> bytes:
    return _message(Op.SYNC, 0, request_id, _SYNC.pack(ledger_id))


def encode_sync_response(request_id: int, status: Status, ledger_id: int, last_add_synced: int, message: str = "") -> bytes:
    return _message(Op.SYNC, status, request_id, _SYNC_RESP.pack(ledger_id, last_add_synced), message.encode())


def encode_write_lac(request_id: int, ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return _message(Op.WRITE_LAC, 0, request_id, _WRITE_LAC.pack(ledger_id, lac, len(master_key)), master_key)


def encode_write_lac_response(request_id: int, status: Status, ledger_id: int, lac: int, message: str = "") -> bytes:
    return _message(Op.WRITE_LAC, status, request_id, _WRITE_LAC_RESP.pack(ledger_id, lac), message.encode())


def encode_write_close(request_id: int, ledger_id: int, master_key: bytes) -> bytes:
    return _message(Op.WRITE_CLOSE, 0, request_id, _WRITE_CLOSE.pack(ledger_id, len(master_key)), master_key)


def encode_write_close_response(request_id: int, status: Status, ledger_id: int, message: str = "") -> bytes:
    return _message(Op.WRITE_CLOSE, status, request_id, _WRITE_CLOSE_RESP.pack(ledger_id), message.encode())


def encode_list_entries(request_id: int, ledger_id: int, first: int, last: int) -> bytes:
    return _message(Op.LIST_ENTRIES, 0, request_id, _LIST_ENTRIES.pack(ledger_id, first, last))


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
    return _message(Op.LIST_ENTRIES, status, request_id, head, table, message.encode())


def encode_read_batch(request_id: int, ledger_id: int, first: int, last: int, max_bytes: int, step: int = 1) -> bytes:
    return _message(Op.READ_BATCH, 0, request_id, _READ_BATCH.pack(ledger_id, first, last, max_bytes, step))


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


def encode_auth(request_id: int, method: str, credential: bytes) -> bytes:
    name = method.encode()
    return _message(Op.AUTH, 0, request_id, _AUTH.pack(len(name), len(credential)), name, credential)


def encode_auth_response(request_id: int, status: Status, message: str) -> bytes:
    """OK with the principal, or UNAUTHORIZED with why (never the credential)."""
    return _message(Op.AUTH, status, request_id, message.encode())


def encode_bookie_info(request_id: int) -> bytes:
    return _message(Op.GET_BOOKIE_INFO, 0, request_id)


def frame(messages: Iterable[Buffer]) -> bytes:
    """Join messages (or message parts) into one length-prefixed frame (one copy)."""
    parts = list(messages)
    return b"".join([FRAME_HEADER.pack(sum(map(len, parts))), *parts])


def decode_requests(body: memoryview, max_entry_size: int) -> list[Request | BadMessage]:
    """Parse every message of a request frame's body.

    A message that does not parse becomes a :class:`BadMessage`; the others are still
    served. A broken message length makes the rest of the frame unparseable, so parsing
    stops there with one BadMessage.
    """
    out: list[Request | BadMessage] = []
    pos = 0
    end = len(body)
    unpack_header = MSG_HEADER.unpack_from
    while pos < end:
        if end - pos < MSG_HEADER.size:
            out.append(BadMessage(0, 0, f"truncated message header at byte {pos} of the frame"))
            break
        length, op, flags, request_id = unpack_header(body, pos)
        msg_end = pos + 4 + length
        if length < 10 or msg_end > end:
            out.append(BadMessage(request_id, op, f"message length {length} does not fit the frame"))
            break
        fields_at = pos + MSG_HEADER.size
        pos = msg_end
        try:
            out.append(_decode_one(body, op, flags, request_id, fields_at, msg_end, max_entry_size))
        except (struct.error, ProtocolError) as e:
            out.append(BadMessage(request_id, op, str(e)))
    return out


def _check_ledger(op: str, ledger_id: int) -> None:
    if ledger_id > MAX_LEDGER_ID:
        raise ProtocolError(
            f"{op} ledger id {ledger_id} is out of range: ledger ids are 0..{MAX_LEDGER_ID} "
            f"(2^63 - 1, what metadata stores hold); use an id the metadata store gave out"
        )


def _check_lac(op: str, lac: int) -> None:
    if lac < -1:
        raise ProtocolError(f"{op} lac {lac} is invalid (-1 means none yet; entry ids are >= 0)")


def _decode_one(
    body: memoryview, op: int, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> Request:
    request = _decode_fields(body, op, flags, request_id, at, end, max_entry_size)
    if not isinstance(request, (BookieInfoRequest, AuthRequest)):
        _check_ledger(Op(op).name, request.ledger_id)
    return request


def _decode_fields(
    body: memoryview, op: int, flags: int, request_id: int, at: int, end: int, max_entry_size: int
) -> Request:
    if op == Op.ADD:
        if end - at < _ADD.size:
            raise ProtocolError("ADD message too short")
        ledger_id, entry_id, lac, ledger_type, key_len = _ADD.unpack_from(body, at)
        if flags & ~_RECOVERY:
            raise ProtocolError(f"unknown ADD flags {flags:#x}")
        key_at = at + _ADD.size
        data_at = key_at + key_len
        if key_len > MAX_MASTER_KEY or data_at > end:
            raise ProtocolError(f"ADD master key length {key_len} is invalid (at most {MAX_MASTER_KEY})")
        if entry_id < 0:
            raise ProtocolError(f"ADD entry id {entry_id} is negative")
        _check_lac("ADD", lac)
        if end - data_at > max_entry_size:
            raise ProtocolError(
                f"entry of {end - data_at} bytes is larger than this bookie's max_entry_size "
                f"{max_entry_size}; split it or raise [bookie] max_entry_size"
            )
        return AddRequest(
            request_id,
            ledger_id,
            entry_id,
            lac,
            ledger_type,
            bytes(body[key_at:data_at]),
            body[data_at:end],
            bool(flags & _RECOVERY),
        )
    if op == Op.READ:
        ledger_id, entry_id, key_len = _READ.unpack_from(body, at)
        if flags & ~_FENCE:
            raise ProtocolError(f"unknown READ flags {flags:#x}")
        key_at = at + _READ.size
        if key_len > MAX_MASTER_KEY or key_at + key_len != end:
            raise ProtocolError(f"READ master key length {key_len} does not match the message")
        if entry_id < LAST_ENTRY:
            raise ProtocolError(f"READ entry id {entry_id} is invalid")
        return ReadRequest(request_id, ledger_id, entry_id, bytes(body[key_at:end]), bool(flags & _FENCE))
    if op == Op.READ_LAC:
        (ledger_id,) = _READ_LAC.unpack_from(body, at)
        if flags == ReadLacFlag.LONG_POLL and end - at == _READ_LAC.size + _LONG_POLL.size:
            previous, timeout_ms = _LONG_POLL.unpack_from(body, at + _READ_LAC.size)
            return ReadLacRequest(request_id, ledger_id, previous, timeout_ms)
        if flags != 0 or end - at != _READ_LAC.size:
            raise ProtocolError("READ_LAC message has the wrong length or unknown flags")
        return ReadLacRequest(request_id, ledger_id)
    if op == Op.ADD_BATCH:
        ledger_id, lac, ledger_type, key_len, count = _ADD_BATCH.unpack_from(body, at)
        if flags & ~_RECOVERY:
            raise ProtocolError(f"unknown ADD_BATCH flags {flags:#x}")
        key_at = at + _ADD_BATCH.size
        dir_at = key_at + key_len
        data_at = dir_at + count * BATCH_DIRECTORY.itemsize
        if key_len > MAX_MASTER_KEY or count == 0 or data_at > end:
            raise ProtocolError(f"ADD_BATCH with key length {key_len} and {count} entries does not fit its message")
        directory = np.frombuffer(body, dtype=BATCH_DIRECTORY, count=count, offset=dir_at)
        lengths = directory["length"].tolist()
        entry_ids = directory["entry_id"].tolist()
        if data_at + sum(lengths) != end:
            raise ProtocolError("ADD_BATCH entry lengths do not add up to the message")
        if max(lengths) > max_entry_size:
            raise ProtocolError(
                f"entry of {max(lengths)} bytes is larger than this bookie's max_entry_size "
                f"{max_entry_size}; split it or raise [bookie] max_entry_size"
            )
        if min(entry_ids) < 0:
            raise ProtocolError(f"ADD_BATCH entry id {min(entry_ids)} is negative")
        _check_lac("ADD_BATCH", lac)
        entries = []
        pos = data_at
        for length in lengths:
            entries.append(body[pos : pos + length])
            pos += length
        return AddBatchRequest(
            request_id, ledger_id, lac, ledger_type, bytes(body[key_at:dir_at]), entry_ids, entries, bool(flags & _RECOVERY)
        )
    if op == Op.SYNC:
        if flags or end - at != _SYNC.size:
            raise ProtocolError("SYNC message has the wrong length or unknown flags")
        (ledger_id,) = _SYNC.unpack_from(body, at)
        return SyncRequest(request_id, ledger_id)
    if op == Op.WRITE_LAC:
        ledger_id, lac, key_len = _WRITE_LAC.unpack_from(body, at)
        key_at = at + _WRITE_LAC.size
        if flags or key_len > MAX_MASTER_KEY or key_at + key_len != end:
            raise ProtocolError("WRITE_LAC message has the wrong length, key length or unknown flags")
        _check_lac("WRITE_LAC", lac)
        return WriteLacRequest(request_id, ledger_id, lac, bytes(body[key_at:end]))
    if op == Op.WRITE_CLOSE:
        ledger_id, key_len = _WRITE_CLOSE.unpack_from(body, at)
        key_at = at + _WRITE_CLOSE.size
        if flags or key_len > MAX_MASTER_KEY or key_at + key_len != end:
            raise ProtocolError("WRITE_CLOSE message has the wrong length, key length or unknown flags")
        return WriteCloseRequest(request_id, ledger_id, bytes(body[key_at:end]))
    if op == Op.LIST_ENTRIES:
        if flags or end - at != _LIST_ENTRIES.size:
            raise ProtocolError("LIST_ENTRIES message has the wrong length or unknown flags")
        ledger_id, first, last = _LIST_ENTRIES.unpack_from(body, at)
        if first < 0 or last < first:
            raise ProtocolError(f"LIST_ENTRIES range {first}..{last} is invalid (need 0 <= first <= last)")
        return ListEntriesRequest(request_id, ledger_id, first, last)
    if op == Op.READ_BATCH:
        if flags or end - at != _READ_BATCH.size:
            raise ProtocolError("READ_BATCH message has the wrong length or unknown flags")
        ledger_id, first, last, max_bytes, step = _READ_BATCH.unpack_from(body, at)
        if first < 0 or last < first or last - first >= MAX_READ_BATCH or max_bytes == 0 or step == 0:
            raise ProtocolError(
                f"READ_BATCH of {first}..{last} step {step} ({max_bytes} bytes) is invalid "
                f"(need 0 <= first <= last < first + {MAX_READ_BATCH}, step > 0, max bytes > 0)"
            )
        return ReadBatchRequest(request_id, ledger_id, first, last, max_bytes, step)
    if op == Op.AUTH:
        if flags or end - at < _AUTH.size:
            raise ProtocolError("AUTH message is too short or has unknown flags")
        name_len, cred_len = _AUTH.unpack_from(body, at)
        name_at = at + _AUTH.size
        if name_len > MAX_AUTH_METHOD or cred_len > MAX_AUTH_CREDENTIAL or name_at + name_len + cred_len != end:
            raise ProtocolError("AUTH message has the wrong length, method length or credential length")
        method = bytes(body[name_at : name_at + name_len]).decode(errors="replace")
        return AuthRequest(request_id, method, bytes(body[name_at + name_len : end]))
    if op == Op.GET_BOOKIE_INFO:
        if end != at:
            raise ProtocolError("GET_BOOKIE_INFO message has the wrong length")
        return BookieInfoRequest(request_id)
    raise ProtocolError(f"unknown op code {op}")


# --- responses ----------------------------------------------------------------------


def encode_add_response(
    request_id: int, status: Status, ledger_id: int, entry_id: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    return _message(Op.ADD, status, request_id, _ADD_RESP.pack(ledger_id, entry_id, last_add_synced), message.encode())


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
    return _message(Op.READ_LAC, status, request_id, _READ_LAC_RESP.pack(ledger_id, lac, last_entry), message.encode())


def encode_bookie_info_response(request_id: int, info: dict[str, Any]) -> bytes:
    return _message(Op.GET_BOOKIE_INFO, Status.OK, request_id, json.dumps(info, sort_keys=True).encode())


def encode_add_batch_response(
    request_id: int, status: Status, ledger_id: int, count: int, last_add_synced: int = -1, message: str = ""
) -> bytes:
    """One status for the whole batch: its entries are stored together or not at all."""
    return _message(Op.ADD_BATCH, status, request_id, _ADD_BATCH_RESP.pack(ledger_id, count, last_add_synced), message.encode())


def encode_error_response(request_id: int, status: Status, message: str) -> bytes:
    return _message(Op.ERROR, status, request_id, message.encode())


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
        entries = []
        pos = data_at
        for entry_id, length in zip(directory["entry_id"].tolist(), directory["length"].tolist()):
            entries.append((entry_id, body[pos : pos + length]))
            pos += length
        if pos > end:
            raise ProtocolError("READ_BATCH response entry lengths overrun the message")
        msg = body[pos:end].decode(errors="replace")
        return Response(op, status, request_id, ledger_id, lac=lac, message=msg, entries=tuple(entries))
    if op == Op.GET_BOOKIE_INFO:
        return Response(op, status, request_id, info=json.loads(body[at:end]))
    return Response(op, status, request_id, message=body[at:end].decode(errors="replace"))


__all__ = [
    "decode_requests",
    "decode_responses",
    "encode_add",
    "encode_add_batch",
    "encode_add_batch_response",
    "encode_add_response",
    "encode_auth",
    "encode_auth_response",
    "encode_bookie_info",
    "encode_bookie_info_response",
    "encode_error_response",
    "encode_list_entries",
    "encode_list_entries_response",
    "encode_read",
    "encode_read_batch",
    "encode_read_batch_response",
    "encode_read_lac",
    "encode_read_lac_response",
    "encode_read_response",
    "encode_sync",
    "encode_sync_response",
    "encode_write_close",
    "encode_write_close_response",
    "encode_write_lac",
    "encode_write_lac_response",
    "frame",
]
