"""Requests to bytes and back: the encoders clients use, and :func:`decode_requests`, which
bookies use and which never raises for bad input (a message that does not parse becomes a
:class:`BadMessage`). Encoders return whole messages, or their parts, so that entry data is
never copied. Frames and message headers: :mod:`.codec`.
"""

from __future__ import annotations

import struct

import numpy as np

from bkframe.core.interfaces import Buffer
from bkframe.proto.codec import pack_message
from bkframe.proto.messages import (
    BATCH_DIRECTORY,
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
    FeaturesRequest,
    ListEntriesRequest,
    Op,
    ProtocolError,
    ReadBatchRequest,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    Request,
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
_SYNC = struct.Struct("<Q")  # ledger
_WRITE_LAC = struct.Struct("<QqH")  # ledger, lac, key_len
_WRITE_CLOSE = struct.Struct("<QH")  # ledger, key_len
_LIST_ENTRIES = struct.Struct("<Qqq")  # ledger, first, last
#: One row of BATCH_DIRECTORY (entry id, length), for the one-entry fast path.
_ONE_ENTRY_DIRECTORY = struct.Struct("<qI")
assert _ONE_ENTRY_DIRECTORY.size == BATCH_DIRECTORY.itemsize
_ADD_BATCH = struct.Struct("<QqHHI")  # ledger, lac, ledger_type, key_len, count
_READ_BATCH = struct.Struct("<QqqIIH")  # ledger, first, last, max bytes, step, key_len (then the key)
_AUTH = struct.Struct("<HI")  # method length, credential length (then both)
_FEATURES = struct.Struct("<I")  # feature bits


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
    return pack_message(Op.READ, flags, request_id, _READ.pack(ledger_id, entry_id, len(master_key)), master_key)


def encode_read_lac(
    request_id: int, ledger_id: int, *, previous_lac: int | None = None, timeout_ms: int = 0
) -> bytes:
    if previous_lac is None:
        return pack_message(Op.READ_LAC, 0, request_id, _READ_LAC.pack(ledger_id))
    poll = _LONG_POLL.pack(previous_lac, timeout_ms)
    return pack_message(Op.READ_LAC, ReadLacFlag.LONG_POLL, request_id, _READ_LAC.pack(ledger_id), poll)


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
    return pack_message(Op.SYNC, 0, request_id, _SYNC.pack(ledger_id))


def encode_write_lac(request_id: int, ledger_id: int, lac: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_LAC, 0, request_id, _WRITE_LAC.pack(ledger_id, lac, len(master_key)), master_key)


def encode_write_close(request_id: int, ledger_id: int, master_key: bytes) -> bytes:
    return pack_message(Op.WRITE_CLOSE, 0, request_id, _WRITE_CLOSE.pack(ledger_id, len(master_key)), master_key)


def encode_list_entries(request_id: int, ledger_id: int, first: int, last: int) -> bytes:
    return pack_message(Op.LIST_ENTRIES, 0, request_id, _LIST_ENTRIES.pack(ledger_id, first, last))


def encode_read_batch(
    request_id: int, ledger_id: int, first: int, last: int, max_bytes: int, step: int = 1, *, master_key: bytes = b""
) -> bytes:
    fields = _READ_BATCH.pack(ledger_id, first, last, max_bytes, step, len(master_key))
    return pack_message(Op.READ_BATCH, 0, request_id, fields, master_key)


def encode_auth(request_id: int, method: str, credential: bytes) -> bytes:
    name = method.encode()
    return pack_message(Op.AUTH, 0, request_id, _AUTH.pack(len(name), len(credential)), name, credential)


def encode_features(request_id: int, features: int) -> bytes:
    return pack_message(Op.FEATURES, 0, request_id, _FEATURES.pack(features))


def encode_bookie_info(request_id: int) -> bytes:
    return pack_message(Op.GET_BOOKIE_INFO, 0, request_id)


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
    if not isinstance(request, (BookieInfoRequest, AuthRequest, FeaturesRequest)):
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
        if flags or end - at < _READ_BATCH.size:
            raise ProtocolError("READ_BATCH message is too short or has unknown flags")
        ledger_id, first, last, max_bytes, step, key_len = _READ_BATCH.unpack_from(body, at)
        key_at = at + _READ_BATCH.size
        if key_len > MAX_MASTER_KEY or key_at + key_len != end:
            raise ProtocolError(f"READ_BATCH master key length {key_len} does not match the message")
        if first < 0 or last < first or last - first >= MAX_READ_BATCH or max_bytes == 0 or step == 0:
            raise ProtocolError(
                f"READ_BATCH of {first}..{last} step {step} ({max_bytes} bytes) is invalid "
                f"(need 0 <= first <= last < first + {MAX_READ_BATCH}, step > 0, max bytes > 0)"
            )
        return ReadBatchRequest(request_id, ledger_id, first, last, max_bytes, step, bytes(body[key_at:end]))
    if op == Op.AUTH:
        if flags or end - at < _AUTH.size:
            raise ProtocolError("AUTH message is too short or has unknown flags")
        name_len, cred_len = _AUTH.unpack_from(body, at)
        name_at = at + _AUTH.size
        if name_len > MAX_AUTH_METHOD or cred_len > MAX_AUTH_CREDENTIAL or name_at + name_len + cred_len != end:
            raise ProtocolError("AUTH message has the wrong length, method length or credential length")
        method = bytes(body[name_at : name_at + name_len]).decode(errors="replace")
        return AuthRequest(request_id, method, bytes(body[name_at + name_len : end]))
    if op == Op.FEATURES:
        # Bits this bookie does not know are ignored: a newer client may understand more.
        if flags or end - at != _FEATURES.size:
            raise ProtocolError("FEATURES message has the wrong length or unknown flags")
        return FeaturesRequest(request_id, _FEATURES.unpack_from(body, at)[0])
    if op == Op.GET_BOOKIE_INFO:
        if end != at:
            raise ProtocolError("GET_BOOKIE_INFO message has the wrong length")
        return BookieInfoRequest(request_id)
    raise ProtocolError(f"unknown op code {op}")


__all__ = [
    "decode_requests",
    "encode_add",
    "encode_add_batch",
    "encode_auth",
    "encode_bookie_info",
    "encode_features",
    "encode_list_entries",
    "encode_read",
    "encode_read_batch",
    "encode_read_lac",
    "encode_sync",
    "encode_write_close",
    "encode_write_lac",
]
