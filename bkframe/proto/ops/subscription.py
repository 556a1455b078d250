"""SUB_LEASE, SUB_SETTLE, SUB_LEAVE and SUB_STATS: a consumer's calls to the bookie that
hosts a subscription's owner (docs/subscriptions.md, docs/protocol.md "Subscriptions").

Every request names the log and the subscription (the log name rules: 1 to 200 ASCII
letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit) and, but for
SUB_STATS, the consumer (1 to :data:`MAX_SUB_CONSUMER` bytes of UTF-8). Positions travel
packed as one u64 (``segment << 32 | entry``, :func:`bkframe.subscriptions.settings.pack`):
the messages here keep them packed, the subscription code turns them into positions.

A refusal of any of them is its header and a UTF-8 message; NOT_OWNER's message is the
owner's bookie id (empty: none known), a newline, then why -- decoded into ``holder`` and
``message``. Every length and count a peer sends is checked against what the message
holds before anything is read or allocated from it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from typing import ClassVar, TypeVar

import attrs
import numpy as np

from bkframe.errors import ProtocolError
from bkframe.proto.base import Reply, text
from bkframe.proto.codes import (
    MAX_SUB_COMMIT_LEDGERS,
    MAX_SUB_COMMIT_OUTPUTS,
    MAX_SUB_CONSUMER,
    MAX_SUB_LEASE,
    MAX_SUB_PROPERTIES,
    MAX_SUB_SETTLE,
    Op,
    Status,
)
from bkframe.proto.frames import message_head, pack_message

#: The log name rules (bkframe.client.logs.model.NAME_PATTERN, which the wire may not import:
#: tests/proto/test_subscription_ops.py checks that the two stay the same).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

_LEASE = struct.Struct("<BBBIII")  # log, sub, consumer lengths; max records, wait ms, lease ms (then the names)
_SETTLE = struct.Struct("<BBBIIIII")  # lengths; lease ms; acks, ranges, nacks, extends counts (then names, arrays)
_LEAVE = struct.Struct("<BBB")  # log, sub, consumer lengths (then the names)
_STATS = struct.Struct("<BB")  # log, sub lengths (then the names)
_COMMIT = struct.Struct("<BBBII")  # log, sub, consumer lengths; positions, outputs (then names, positions, outputs)
_OUTPUT = struct.Struct("<BBI")  # an output log's name length, password length, ledger count (then those, ids u64)
_OUTPUT_ANSWER = struct.Struct("<BI")  # name length, segment count
_POSITION = np.dtype("<u8")
_RANGE = np.dtype([("first", "<u8"), ("last", "<u8")])
_NACK = np.dtype([("position", "<u8"), ("delay_ms", "<u4")])
#: Arrays up to this long are packed and read with struct (a settle of one ack: numpy's
#: per-call cost is most of it); longer ones with numpy.
_SMALL = 64


def _pack_u64s(values: Sequence[int]) -> bytes:
    n = len(values)
    return struct.pack(f"<{n}Q", *values) if n <= _SMALL else np.array(values, dtype=_POSITION).tobytes()


def _pack_ranges(pairs: Sequence[tuple[int, int]]) -> bytes:
    n = len(pairs)
    if n <= _SMALL:
        return struct.pack(f"<{2 * n}Q", *(x for pair in pairs for x in pair))
    return np.array(list(pairs), dtype=_RANGE).tobytes()


def _pack_nacks(nacks: Sequence[tuple[int, int]]) -> bytes:
    n = len(nacks)
    if n <= _SMALL:
        return struct.pack("<" + "QI" * n, *(x for pair in nacks for x in pair))
    return np.array(list(nacks), dtype=_NACK).tobytes()


def _read_u64s(body: memoryview, at: int, n: int) -> tuple[int, ...]:
    if n <= _SMALL:
        return struct.unpack_from(f"<{n}Q", body, at)
    return tuple(np.frombuffer(body, dtype=_POSITION, count=n, offset=at).tolist())


def _read_ranges(body: memoryview, at: int, n: int) -> tuple[tuple[int, int], ...]:
    if n <= _SMALL:
        flat = struct.unpack_from(f"<{2 * n}Q", body, at)
        return tuple(zip(flat[0::2], flat[1::2], strict=True))
    ranges = np.frombuffer(body, dtype=_RANGE, count=n, offset=at)
    return tuple(zip(ranges["first"].tolist(), ranges["last"].tolist(), strict=True))


def _read_nacks(body: memoryview, at: int, n: int) -> tuple[tuple[int, int], ...]:
    if n <= _SMALL:
        flat = struct.unpack_from("<" + "QI" * n, body, at)
        return tuple(zip(flat[0::2], flat[1::2], strict=True))
    nacks = np.frombuffer(body, dtype=_NACK, count=n, offset=at)
    return tuple(zip(nacks["position"].tolist(), nacks["delay_ms"].tolist(), strict=True))

#: SUB_LEASE answer: records (then each record); SUB_COMMIT answer: outputs (then each
#: _OUTPUT_ANSWER, its name, segments u64).
_COUNT = struct.Struct("<I")
#: A record of a SUB_LEASE answer: position, delivery count, deadline ms, flags (_HAS_KEY,
#: _HAS_TIMESTAMP), timestamp ms, key length, property count, payload length; then the key,
#: the properties (each _PROPERTY then its key and value), the payload.
_RECORD = struct.Struct("<QIqBqIHI")
_PROPERTY = struct.Struct("<HI")  # key length, value length
_HAS_KEY = 0x01
_HAS_TIMESTAMP = 0x02
#: SUB_STATS answer: backlog, in flight, waiting, delayed, delivered, redelivered, acked,
#: dead-lettered, mark-delete (packed), consumers, epoch, owner length (then the owner).
_STATS_ANSWER = struct.Struct("<qqqqqqqqQIqB")


# -- requests --------------------------------------------------------------------------


@attrs.frozen
class SubRequest:
    """A request about one subscription of a log (every SUB_* request extends it)."""

    request_id: int
    log: str
    subscription: str
    #: The log's password (b"": none).
    password: bytes = attrs.field(default=b"", kw_only=True, repr=False)


@attrs.frozen
class SubLeaseRequest(SubRequest):
    consumer: str
    max_records: int
    #: How long the owner may wait for a first record (the bookie caps it).
    wait_ms: int
    #: The leases' length (0: the subscription's).
    lease_ms: int = 0


@attrs.frozen
class SubSettleRequest(SubRequest):
    consumer: str
    #: Packed positions acked.
    acks: tuple[int, ...] = ()
    #: Inclusive (first, last) packed ranges acked.
    ack_ranges: tuple[tuple[int, int], ...] = ()
    #: (packed position, delay ms) to deliver again.
    nacks: tuple[tuple[int, int], ...] = ()
    #: Packed positions whose lease is extended by ``lease_ms`` (0: the subscription's).
    extends: tuple[int, ...] = ()
    lease_ms: int = 0


@attrs.frozen
class SubLeaveRequest(SubRequest):
    consumer: str


@attrs.frozen
class SubStatsRequest(SubRequest):
    pass


@attrs.frozen
class SubOutput:
    """A SUB_COMMIT's output: closed ledgers for one log, with that log's password."""

    log: str
    ledgers: tuple[int, ...]
    password: bytes = attrs.field(default=b"", repr=False)


@attrs.frozen
class SubCommitRequest(SubRequest):
    consumer: str
    #: Packed positions acked by the commit.
    positions: tuple[int, ...] = ()
    outputs: tuple[SubOutput, ...] = ()


# -- responses -------------------------------------------------------------------------


@attrs.frozen
class SubRecord:
    """One record leased (a SUB_LEASE answer's part), its position packed."""

    position: int
    delivery_count: int
    deadline_ms: int
    payload: bytes
    key: bytes | None = None
    timestamp: int | None = None
    properties: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class SubReply(Reply):
    #: NOT_OWNER: the owner's bookie id ("" when none is known: ask another bookie).
    holder: str = ""


R = TypeVar("R", bound=SubReply)


@attrs.frozen
class SubLeaseResponse(SubReply):
    op: ClassVar[Op] = Op.SUB_LEASE
    records: tuple[SubRecord, ...] = ()


@attrs.frozen
class SubSettleResponse(SubReply):
    op: ClassVar[Op] = Op.SUB_SETTLE


@attrs.frozen
class SubLeaveResponse(SubReply):
    op: ClassVar[Op] = Op.SUB_LEAVE


@attrs.frozen
class SubCommitResponse(SubReply):
    op: ClassVar[Op] = Op.SUB_COMMIT
    #: The segments each output log's ledgers became.
    segments: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)


@attrs.frozen
class SubStatsResponse(SubReply):
    op: ClassVar[Op] = Op.SUB_STATS
    backlog: int = 0
    in_flight: int = 0
    waiting: int = 0
    delayed: int = 0
    delivered: int = 0
    redelivered: int = 0
    acked: int = 0
    dead_lettered: int = 0
    #: Packed.
    mark_delete: int = 0
    consumers: int = 0
    epoch: int = 0
    owner: str | None = None


# -- names -----------------------------------------------------------------------------


def _name_bytes(name: str, what: str) -> bytes:
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"bad {what} name {name!r}: use 1 to 200 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name.encode("ascii")


def _consumer_bytes(consumer: str) -> bytes:
    raw = consumer.encode()
    if not 1 <= len(raw) <= MAX_SUB_CONSUMER:
        raise ValueError(f"consumer id {consumer!r} must be 1 to {MAX_SUB_CONSUMER} bytes of UTF-8")
    return raw


#: Names checked already, by their lengths and bytes: a consumer sends the same three with
#: every call (a confirmed ack is one call a record), and checking them again was a good part
#: of decoding a settle. Bounded: emptied when full, so no sender can grow it.
_NAMES_SEEN: dict[tuple[tuple[int, ...], bytes], list[str]] = {}
MAX_NAMES_SEEN = 4096


def _names(op: str, body: memoryview, at: int, end: int, lengths: Sequence[int]) -> tuple[list[str], int]:
    """The names after a request's fixed fields (log, subscription[, consumer]) and where
    they end; each checked: lengths within the message, log rules, UTF-8."""
    total = sum(lengths)
    if at + total <= end:
        key = (tuple(lengths), bytes(body[at : at + total]))
        seen = _NAMES_SEEN.get(key)
        if seen is not None:
            return seen, at + total
        out, after = _check_names(op, body, at, end, lengths)
        if len(_NAMES_SEEN) >= MAX_NAMES_SEEN:
            _NAMES_SEEN.clear()
        _NAMES_SEEN[key] = out
        return out, after
    return _check_names(op, body, at, end, lengths)


def _check_names(op: str, body: memoryview, at: int, end: int, lengths: Sequence[int]) -> tuple[list[str], int]:
    out: list[str] = []
    for i, length in enumerate(lengths):
        if at + length > end:
            raise ProtocolError(f"{op} message is shorter than its name lengths")
        raw = bytes(body[at : at + length])
        at += length
        if i < 2:
            try:
                name = raw.decode("ascii")
            except UnicodeDecodeError:
                name = ""
            if not NAME_PATTERN.fullmatch(name):
                what = "log" if i == 0 else "subscription"
                raise ProtocolError(
                    f"{op} {what} name {raw[:64]!r} is invalid: 1 to 200 letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit"
                )
        else:
            if not 1 <= length <= MAX_SUB_CONSUMER:
                raise ProtocolError(f"{op} consumer id of {length} bytes is invalid (1 to {MAX_SUB_CONSUMER})")
            try:
                name = raw.decode()
            except UnicodeDecodeError:
                raise ProtocolError(f"{op} consumer id is not UTF-8") from None
        out.append(name)
    return out, at


#: A request's flag: the log's password follows every other field, then its length (one
#: byte). A log's records and acks are guarded by its password, as a ledger's entries are
#: by its key (docs/security.md): the owner checks it before it answers.
PASSWORD_FLAG = 0x01
MAX_SUB_PASSWORD = 255


def _password_parts(password: bytes) -> tuple[int, list[bytes]]:
    """The flags and the trailing parts that carry ``password`` (none for the empty one)."""
    if not password:
        return 0, []
    if len(password) > MAX_SUB_PASSWORD:
        raise ValueError(f"a log's password is at most {MAX_SUB_PASSWORD} bytes on the wire, got {len(password)}")
    return PASSWORD_FLAG, [bytes(password), bytes([len(password)])]


def _password(op: str, body: memoryview, flags: int, fixed_end: int, end: int) -> tuple[bytes, int]:
    """The password at the message's end (if flagged) and where the other fields end."""
    if flags & ~PASSWORD_FLAG:
        raise ProtocolError(f"{op} message has unknown flags {flags:#x}")
    if not flags & PASSWORD_FLAG:
        return b"", end
    if end - 1 < fixed_end:
        raise ProtocolError(f"{op} message is shorter than its password's length")
    start = end - 1 - body[end - 1]
    if start < fixed_end:
        raise ProtocolError(f"{op} message is shorter than its password")
    return bytes(body[start : end - 1]), start


# -- SUB_LEASE ---------------------------------------------------------------------------


def encode_sub_lease(
    request_id: int, log: str, subscription: str, consumer: str, max_records: int, wait_ms: int, lease_ms: int = 0,
    *, password: bytes = b"",
) -> bytes:
    names = (_name_bytes(log, "log"), _name_bytes(subscription, "subscription"), _consumer_bytes(consumer))
    head = _LEASE.pack(*map(len, names), max_records, wait_ms, lease_ms)
    flags, secret = _password_parts(password)
    return pack_message(Op.SUB_LEASE, flags, request_id, head, *names, *secret)


def decode_sub_lease(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SubLeaseRequest:
    password, end = _password("SUB_LEASE", body, flags, at + _LEASE.size, end)
    log_len, sub_len, consumer_len, max_records, wait_ms, lease_ms = _LEASE.unpack_from(body, at)
    (log, sub, consumer), names_end = _names("SUB_LEASE", body, at + _LEASE.size, end, (log_len, sub_len, consumer_len))
    if names_end != end:
        raise ProtocolError("SUB_LEASE message has the wrong length for its names")
    if not 1 <= max_records <= MAX_SUB_LEASE:
        raise ProtocolError(f"SUB_LEASE of {max_records} records is invalid (1 to {MAX_SUB_LEASE})")
    return SubLeaseRequest(request_id, log, sub, consumer, max_records, wait_ms, lease_ms, password=password)


def encode_sub_lease_response(request_id: int, records: Sequence[SubRecord]) -> list[bytes]:
    """OK with ``records`` (a refusal: :func:`encode_sub_refusal`)."""
    parts = [b"", _COUNT.pack(len(records))]
    for r in records:
        flags = (_HAS_KEY if r.key is not None else 0) | (_HAS_TIMESTAMP if r.timestamp is not None else 0)
        key = r.key or b""
        props = [(k.encode(), v.encode()) for k, v in r.properties.items()]
        parts.append(
            _RECORD.pack(
                r.position, r.delivery_count, r.deadline_ms, flags, r.timestamp or 0, len(key), len(props), len(r.payload)
            )
        )
        parts.append(key)
        for k, v in props:
            parts += (_PROPERTY.pack(len(k), len(v)), k, v)
        parts.append(r.payload)
    parts[0] = message_head(sum(map(len, parts)), Op.SUB_LEASE, Status.OK, request_id)
    return parts


def decode_sub_lease_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SubLeaseResponse:
    if status != Status.OK:
        return _refusal(SubLeaseResponse, body, status, request_id, at, end)
    count, at = _count(body, at, MAX_SUB_LEASE, "SUB_LEASE answer", "records")
    records: list[SubRecord] = []
    for _ in range(count):
        if at + _RECORD.size > end:
            raise ProtocolError("SUB_LEASE answer is shorter than its record count")
        position, deliveries, deadline, flags, timestamp, key_len, prop_count, payload_len = _RECORD.unpack_from(body, at)
        at += _RECORD.size
        if at + key_len > end:
            raise ProtocolError("SUB_LEASE answer is shorter than a record's key")
        key = bytes(body[at : at + key_len]) if flags & _HAS_KEY else None
        at += key_len
        if prop_count > MAX_SUB_PROPERTIES:
            raise ProtocolError(f"SUB_LEASE answer: a record of {prop_count} properties (at most {MAX_SUB_PROPERTIES})")
        properties: dict[str, str] = {}
        for _ in range(prop_count):
            if at + _PROPERTY.size > end:
                raise ProtocolError("SUB_LEASE answer is shorter than a record's properties")
            k_len, v_len = _PROPERTY.unpack_from(body, at)
            at += _PROPERTY.size
            if at + k_len + v_len > end:
                raise ProtocolError("SUB_LEASE answer is shorter than a record's properties")
            try:
                properties[str(body[at : at + k_len], "utf-8")] = str(body[at + k_len : at + k_len + v_len], "utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("SUB_LEASE answer: a record's property is not UTF-8") from None
            at += k_len + v_len
        if at + payload_len > end:
            raise ProtocolError("SUB_LEASE answer is shorter than a record's payload")
        payload = bytes(body[at : at + payload_len])
        at += payload_len
        stamp = timestamp if flags & _HAS_TIMESTAMP else None
        records.append(SubRecord(position, deliveries, deadline, payload, key, stamp, properties))
    # Bytes after the records: a message (as other answers have), never a record.
    return SubLeaseResponse(request_id, status, text(body, at, end), records=tuple(records))


# -- SUB_SETTLE --------------------------------------------------------------------------


def encode_sub_settle(
    request_id: int,
    log: str,
    subscription: str,
    consumer: str,
    *,
    acks: Sequence[int] = (),
    ack_ranges: Sequence[tuple[int, int]] = (),
    nacks: Sequence[tuple[int, int]] = (),
    extends: Sequence[int] = (),
    lease_ms: int = 0,
    password: bytes = b"",
) -> list[bytes]:
    """Positions packed; ``nacks``: (position, delay ms); ``lease_ms`` 0: the subscription's."""
    names = (_name_bytes(log, "log"), _name_bytes(subscription, "subscription"), _consumer_bytes(consumer))
    head = _SETTLE.pack(*map(len, names), lease_ms, len(acks), len(ack_ranges), len(nacks), len(extends))
    arrays = [_pack_u64s(acks), _pack_ranges(ack_ranges), _pack_nacks(nacks), _pack_u64s(extends)]
    flags, secret = _password_parts(password)
    fields = [head, *names, *arrays, *secret]
    return [message_head(sum(map(len, fields)), Op.SUB_SETTLE, flags, request_id), *fields]


def decode_sub_settle(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SubSettleRequest:
    password, end = _password("SUB_SETTLE", body, flags, at + _SETTLE.size, end)
    log_len, sub_len, consumer_len, lease_ms, n_acks, n_ranges, n_nacks, n_extends = _SETTLE.unpack_from(body, at)
    (log, sub, consumer), at = _names("SUB_SETTLE", body, at + _SETTLE.size, end, (log_len, sub_len, consumer_len))
    total = n_acks + n_ranges + n_nacks + n_extends
    if total > MAX_SUB_SETTLE:
        raise ProtocolError(f"SUB_SETTLE of {total} acks, ranges, nacks and extends is more than {MAX_SUB_SETTLE}")
    size = (n_acks + n_extends) * _POSITION.itemsize + n_ranges * _RANGE.itemsize + n_nacks * _NACK.itemsize
    if at + size != end:
        raise ProtocolError("SUB_SETTLE message has the wrong length for its counts")
    acks = _read_u64s(body, at, n_acks)
    at += n_acks * _POSITION.itemsize
    pairs = _read_ranges(body, at, n_ranges)
    at += n_ranges * _RANGE.itemsize
    nacks = _read_nacks(body, at, n_nacks)
    at += n_nacks * _NACK.itemsize
    extends = _read_u64s(body, at, n_extends)
    for first, last in pairs:
        if first > last:
            raise ProtocolError(f"SUB_SETTLE ack range {first}..{last} is backwards (packed positions)")
    return SubSettleRequest(request_id, log, sub, consumer, acks, pairs, nacks, extends, lease_ms, password=password)


def encode_sub_settle_response(request_id: int) -> bytes:
    """OK: the settle is durable (a refusal: :func:`encode_sub_refusal`)."""
    return pack_message(Op.SUB_SETTLE, Status.OK, request_id)


def decode_sub_settle_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SubSettleResponse:
    return _refusal(SubSettleResponse, body, status, request_id, at, end)


# -- SUB_LEAVE ---------------------------------------------------------------------------


def encode_sub_leave(request_id: int, log: str, subscription: str, consumer: str, *, password: bytes = b"") -> bytes:
    names = (_name_bytes(log, "log"), _name_bytes(subscription, "subscription"), _consumer_bytes(consumer))
    flags, secret = _password_parts(password)
    return pack_message(Op.SUB_LEAVE, flags, request_id, _LEAVE.pack(*map(len, names)), *names, *secret)


def decode_sub_leave(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SubLeaveRequest:
    password, end = _password("SUB_LEAVE", body, flags, at + _LEAVE.size, end)
    (log, sub, consumer), names_end = _names("SUB_LEAVE", body, at + _LEAVE.size, end, _LEAVE.unpack_from(body, at))
    if names_end != end:
        raise ProtocolError("SUB_LEAVE message has the wrong length for its names")
    return SubLeaveRequest(request_id, log, sub, consumer, password=password)


def encode_sub_leave_response(request_id: int) -> bytes:
    return pack_message(Op.SUB_LEAVE, Status.OK, request_id)


def decode_sub_leave_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SubLeaveResponse:
    return _refusal(SubLeaveResponse, body, status, request_id, at, end)


# -- SUB_STATS ---------------------------------------------------------------------------


def encode_sub_stats(request_id: int, log: str, subscription: str, *, password: bytes = b"") -> bytes:
    names = (_name_bytes(log, "log"), _name_bytes(subscription, "subscription"))
    flags, secret = _password_parts(password)
    return pack_message(Op.SUB_STATS, flags, request_id, _STATS.pack(*map(len, names)), *names, *secret)


def decode_sub_stats(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SubStatsRequest:
    password, end = _password("SUB_STATS", body, flags, at + _STATS.size, end)
    (log, sub), names_end = _names("SUB_STATS", body, at + _STATS.size, end, _STATS.unpack_from(body, at))
    if names_end != end:
        raise ProtocolError("SUB_STATS message has the wrong length for its names")
    return SubStatsRequest(request_id, log, sub, password=password)


def encode_sub_stats_response(
    request_id: int,
    *,
    backlog: int,
    in_flight: int,
    waiting: int,
    delayed: int,
    delivered: int,
    redelivered: int,
    acked: int,
    dead_lettered: int,
    mark_delete: int,
    consumers: int,
    epoch: int,
    owner: str | None,
) -> bytes:
    """OK with the stats (``mark_delete`` packed; ``owner`` at most 255 bytes of UTF-8)."""
    who = (owner or "").encode()[:255]
    fields = _STATS_ANSWER.pack(
        backlog, in_flight, waiting, delayed, delivered, redelivered, acked, dead_lettered, mark_delete, consumers, epoch,
        len(who),
    )
    return pack_message(Op.SUB_STATS, Status.OK, request_id, fields, who)


def decode_sub_stats_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SubStatsResponse:
    if status != Status.OK:
        return _refusal(SubStatsResponse, body, status, request_id, at, end)
    (backlog, in_flight, waiting, delayed, delivered, redelivered, acked, dead, mark_delete, consumers, epoch,
     owner_len) = _STATS_ANSWER.unpack_from(body, at)
    owner_at = at + _STATS_ANSWER.size
    owner_end = owner_at + owner_len
    if owner_end > end:
        raise ProtocolError("SUB_STATS answer is shorter than its owner")
    owner = text(body, owner_at, owner_end) or None
    return SubStatsResponse(
        request_id, status, text(body, owner_end, end), "", backlog, in_flight, waiting, delayed, delivered, redelivered,
        acked, dead, mark_delete, consumers, epoch, owner,
    )


# -- refusals ----------------------------------------------------------------------------


# -- SUB_COMMIT --------------------------------------------------------------------------


def encode_sub_commit(
    request_id: int, log: str, subscription: str, consumer: str, positions: Sequence[int], outputs: Sequence[SubOutput],
    *, password: bytes = b"",
) -> list[bytes]:
    """Ack ``positions`` (packed) with ``outputs``' ledgers committed, in one step."""
    if not 1 <= len(outputs) <= MAX_SUB_COMMIT_OUTPUTS:
        raise ValueError(f"a commit has 1 to {MAX_SUB_COMMIT_OUTPUTS} output logs, got {len(outputs)}")
    names = (_name_bytes(log, "log"), _name_bytes(subscription, "subscription"), _consumer_bytes(consumer))
    fields = [_COMMIT.pack(*map(len, names), len(positions), len(outputs)), *names,
              np.array(positions, dtype=_POSITION).tobytes()]
    for out in outputs:
        if len(out.ledgers) > MAX_SUB_COMMIT_LEDGERS or len(out.password) > MAX_SUB_PASSWORD:
            raise ValueError(
                f"output log {out.log!r}: at most {MAX_SUB_COMMIT_LEDGERS} ledgers and a {MAX_SUB_PASSWORD}-byte password"
            )
        name = _name_bytes(out.log, "log")
        fields += [_OUTPUT.pack(len(name), len(out.password), len(out.ledgers)), name, bytes(out.password),
                   np.array(out.ledgers, dtype=_POSITION).tobytes()]
    flags, secret = _password_parts(password)
    fields += secret
    return [message_head(sum(map(len, fields)), Op.SUB_COMMIT, flags, request_id), *fields]


def decode_sub_commit(body: memoryview, flags: int, request_id: int, at: int, end: int, max_entry_size: int) -> SubCommitRequest:
    password, end = _password("SUB_COMMIT", body, flags, at + _COMMIT.size, end)
    log_len, sub_len, consumer_len, n_positions, n_outputs = _COMMIT.unpack_from(body, at)
    (log, sub, consumer), at = _names("SUB_COMMIT", body, at + _COMMIT.size, end, (log_len, sub_len, consumer_len))
    if n_positions > MAX_SUB_SETTLE or not 1 <= n_outputs <= MAX_SUB_COMMIT_OUTPUTS:
        raise ProtocolError(
            f"SUB_COMMIT of {n_positions} positions and {n_outputs} outputs is invalid (at most {MAX_SUB_SETTLE}; 1 to "
            f"{MAX_SUB_COMMIT_OUTPUTS})"
        )
    if at + n_positions * _POSITION.itemsize > end:
        raise ProtocolError("SUB_COMMIT message is shorter than its positions")
    positions = np.frombuffer(body, dtype=_POSITION, count=n_positions, offset=at)
    at += positions.nbytes
    outputs: list[SubOutput] = []
    for _ in range(n_outputs):
        if at + _OUTPUT.size > end:
            raise ProtocolError("SUB_COMMIT message is shorter than its outputs")
        name_len, pw_len, n_ledgers = _OUTPUT.unpack_from(body, at)
        at += _OUTPUT.size
        if n_ledgers > MAX_SUB_COMMIT_LEDGERS:
            raise ProtocolError(f"SUB_COMMIT output of {n_ledgers} ledgers (at most {MAX_SUB_COMMIT_LEDGERS})")
        (name,), at = _names("SUB_COMMIT", body, at, end, (name_len,))
        if at + pw_len + n_ledgers * _POSITION.itemsize > end:
            raise ProtocolError("SUB_COMMIT message is shorter than an output's password and ledgers")
        out_password = bytes(body[at : at + pw_len])
        at += pw_len
        ledgers = np.frombuffer(body, dtype=_POSITION, count=n_ledgers, offset=at)
        at += ledgers.nbytes
        outputs.append(SubOutput(name, tuple(ledgers.tolist()), out_password))
    if at != end:
        raise ProtocolError("SUB_COMMIT message has the wrong length for its outputs")
    return SubCommitRequest(
        request_id, log, sub, consumer, tuple(positions.tolist()), tuple(outputs), password=password
    )


def encode_sub_commit_response(request_id: int, segments: Mapping[str, Sequence[int]]) -> bytes:
    """OK with the segments each output log's ledgers became."""
    fields = [_COUNT.pack(len(segments))]
    for name, numbers in segments.items():
        raw = name.encode("ascii")
        fields += [_OUTPUT_ANSWER.pack(len(raw), len(numbers)), raw, np.array(numbers, dtype=_POSITION).tobytes()]
    return pack_message(Op.SUB_COMMIT, Status.OK, request_id, *fields)


def decode_sub_commit_response(body: memoryview, status: Status, request_id: int, at: int, end: int) -> SubCommitResponse:
    if status != Status.OK:
        return _refusal(SubCommitResponse, body, status, request_id, at, end)
    count, at = _count(body, at, MAX_SUB_COMMIT_OUTPUTS, "SUB_COMMIT answer", "outputs")
    segments: dict[str, tuple[int, ...]] = {}
    for _ in range(count):
        if at + _OUTPUT_ANSWER.size > end:
            raise ProtocolError("SUB_COMMIT answer is shorter than its outputs")
        name_len, n = _OUTPUT_ANSWER.unpack_from(body, at)
        at += _OUTPUT_ANSWER.size
        if at + name_len + n * _POSITION.itemsize > end:
            raise ProtocolError("SUB_COMMIT answer is shorter than an output")
        name = str(body[at : at + name_len], "ascii", errors="replace")
        at += name_len
        numbers = np.frombuffer(body, dtype=_POSITION, count=n, offset=at)
        at += numbers.nbytes
        segments[name] = tuple(numbers.tolist())
    return SubCommitResponse(request_id, status, text(body, at, end), segments=segments)


def encode_sub_refusal(op: Op, request_id: int, status: Status, message: str, holder: str = "") -> bytes:
    """A refusal of any SUB_* request: its status and why; NOT_OWNER's carries the holder
    (the owner's bookie id; "" when none is known) before a newline."""
    if status == Status.OK:
        raise ValueError("a refusal needs a status other than OK")
    body = f"{holder}\n{message}" if status == Status.NOT_OWNER else message
    return pack_message(op, status, request_id, body.encode())


def _count(body: memoryview, at: int, limit: int, answer: str, what: str) -> tuple[int, int]:
    """An answer's count of ``what``, and where they start. A count beyond what any request
    asks for is refused before a decoder loops over it."""
    (count,) = _COUNT.unpack_from(body, at)
    if count > limit:
        raise ProtocolError(f"{answer} of {count} {what} is more than any request asks ({limit})")
    return count, at + _COUNT.size


def _refusal(cls: type[R], body: memoryview, status: Status, request_id: int, at: int, end: int) -> R:
    """An answer that is its status and a message (every SUB_* refusal, and SUB_SETTLE's and
    SUB_LEAVE's OK)."""
    why = text(body, at, end)
    holder = ""
    if status == Status.NOT_OWNER:
        holder, _, why = why.partition("\n")
    return cls(request_id, status, why, holder)


