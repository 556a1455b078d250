"""Every bound a stranger's bytes can hit in a frame's messages, without a socket: each
bad message becomes a BadMessage saying what was wrong (the bookie answers it
BAD_REQUEST), and the good messages around it are still decoded. The bounds every
operation of proto/table.py has (its message cut short or too long, unknown flags, a
ledger id out of range) are tested for each row; each operation's own below. The client's
side: responses that do not parse raise ProtocolError. (Frames themselves: test_frames.py;
random messages: test_decoder_fuzz.py; the same bounds against a running bookie:
tests/bookie/test_malformed_input.py.)"""

from __future__ import annotations

import struct

import attrs
import pytest

from bkframe.errors import ProtocolError
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import MAX_AUTH_CREDENTIAL, MAX_LEDGER_ID, MAX_READ_BATCH, MAX_SUB_LEASE, MAX_SUB_SETTLE, Op, Status
from bkframe.proto.frames import FrameBuffer, pack_frame, pack_message
from bkframe.proto.ops.add import encode_add
from bkframe.proto.ops.add_batch import encode_add_batch
from bkframe.proto.ops.bookie_info import encode_bookie_info
from bkframe.proto.ops.connection_setup import encode_auth, encode_features
from bkframe.proto.ops.list_entries import encode_list_entries
from bkframe.proto.ops.read import encode_read
from bkframe.proto.ops.read_batch import encode_read_batch
from bkframe.proto.ops.read_lac import encode_read_lac
from bkframe.proto.ops.subscription import (
    SubOutput,
    encode_sub_commit,
    encode_sub_lease,
    encode_sub_leave,
    encode_sub_settle,
    encode_sub_stats,
)
from bkframe.proto.ops.sync import encode_sync
from bkframe.proto.ops.write_close import encode_write_close
from bkframe.proto.ops.write_lac import encode_write_lac
from bkframe.proto.table import OPERATIONS, decode_requests, decode_responses, encode_error_response
from tests.proto.samples import ANSWERS, REQUESTS, joined

MAX_ENTRY = 1024
KEY = b"k" * 8


def through_the_buffer(*messages: bytes) -> list[object]:
    frames = FrameBuffer()
    frames.feed(pack_frame(list(messages)))
    body = frames.next_frame()
    assert body is not None
    return list(decode_requests(body, MAX_ENTRY))


def with_field(message: bytes, at: int, fmt: str, value: int) -> bytes:
    """``message`` with the field at byte ``at`` (from the message start) set to ``value``."""
    out = bytearray(message)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def resized(message: bytes, delta: int) -> bytes:
    """``message`` cut (or padded) by ``delta`` bytes, its length field saying so."""
    out = message[:delta] if delta < 0 else message + b"\0" * delta
    return with_field(out, 0, "<I", len(out) - 4)


HEAD = 14  # length u32, op u8, flags u8, request id u64
SUB_LEASE_AT = struct.Struct("<BBBIII")
SETTLE = joined(encode_sub_settle(9, "l", "s", "c", acks=[1, 2], ack_ranges=[(3, 4)]))
COMMIT = joined(encode_sub_commit(9, "l", "s", "c", [1], [SubOutput("o", (7,))]))
BAD = [
    ("unknown op", pack_message(200, 0, 9), "unknown op code 200"),
    ("ADD too short", pack_message(Op.ADD, 0, 9, b"\0" * 10), "ADD message too short"),
    ("ADD unknown flags", with_field(joined(encode_add(9, 1, 0, -1, 0, KEY, b"x")), 5, "<B", 0x80), "unknown ADD flags"),
    ("ADD key too long", joined(encode_add(9, 1, 0, -1, 0, b"k" * 65, b"x")), "master key length 65"),
    ("ADD negative entry", joined(encode_add(9, 1, -5, -1, 0, KEY, b"x")), "entry id -5 is negative"),
    ("ADD lac below -1", joined(encode_add(9, 1, 0, -2, 0, KEY, b"x")), "lac -2 is invalid"),
    ("ADD entry too large", joined(encode_add(9, 1, 0, -1, 0, KEY, b"x" * (MAX_ENTRY + 1))), "max_entry_size"),
    ("ADD ledger id out of range", joined(encode_add(9, MAX_LEDGER_ID + 1, 0, -1, 0, KEY, b"x")), "out of range"),
    (
        "ADD_BATCH of no entries",
        with_field(joined(encode_add_batch(9, 1, -1, 0, KEY, [0], [b"x"])), HEAD + 20, "<I", 0),
        "0 entries does not fit",
    ),
    (
        "ADD_BATCH count beyond the message",
        with_field(joined(encode_add_batch(9, 1, -1, 0, KEY, [0], [b"x"])), HEAD + 20, "<I", 2**32 - 1),
        "does not fit its message",
    ),
    (
        "ADD_BATCH lengths that do not add up",
        resized(joined(encode_add_batch(9, 1, -1, 0, KEY, [0, 1], [b"x", b"yy"])), -1),
        "lengths do not add up",
    ),
    ("ADD_BATCH entry too large", joined(encode_add_batch(9, 1, -1, 0, KEY, [0, 1], [b"x", b"y" * 2000])), "max_entry_size"),
    ("ADD_BATCH negative entry", joined(encode_add_batch(9, 1, -1, 0, KEY, [-3, 1], [b"x", b"y"])), "entry id -3"),
    ("READ key length", resized(encode_read(9, 1, 0, master_key=KEY), -1), "master key length"),
    ("READ entry below LAST_ENTRY", encode_read(9, 1, -2), "READ entry id -2 is invalid"),
    ("READ unknown flags", with_field(encode_read(9, 1, 0), 5, "<B", 0x40), "unknown READ flags"),
    ("READ_LAC unknown flags", with_field(encode_read_lac(9, 1), 5, "<B", 0x02), "wrong length or unknown flags"),
    ("READ_LAC long poll cut short", resized(encode_read_lac(9, 1, previous_lac=3, timeout_ms=5), -1), "wrong length"),
    ("WRITE_LAC lac below -1", encode_write_lac(9, 1, -2, KEY), "WRITE_LAC lac -2 is invalid"),
    ("WRITE_LAC key too long", encode_write_lac(9, 1, 0, b"k" * 65), "key length"),
    ("WRITE_CLOSE key too long", encode_write_close(9, 1, b"k" * 65), "key length"),
    ("WRITE_CLOSE key cut short", resized(encode_write_close(9, 1, KEY), -1), "wrong length"),
    ("READ_BATCH span", encode_read_batch(9, 1, 0, MAX_READ_BATCH, 1 << 20), "is invalid"),
    ("READ_BATCH step 0", encode_read_batch(9, 1, 0, 5, 1 << 20, 0), "step 0"),
    ("READ_BATCH no bytes", encode_read_batch(9, 1, 0, 5, 0), "(0 bytes) is invalid"),
    ("LIST_ENTRIES backwards", encode_list_entries(9, 1, 5, 2), "range 5..2 is invalid"),
    ("SYNC wrong length", resized(encode_sync(9, 1), 1), "SYNC message has the wrong length"),
    ("AUTH method too long", encode_auth(9, "m" * 256, b""), "method length"),
    ("AUTH credential too long", encode_auth(9, "token", b"c" * (MAX_AUTH_CREDENTIAL + 1)), "credential length"),
    ("FEATURES wrong length", resized(encode_features(9, 1), 1), "FEATURES message has the wrong length"),
    ("FEATURES unknown flags", with_field(encode_features(9, 1), 5, "<B", 0x01), "unknown flags"),
    ("GET_BOOKIE_INFO with fields", pack_message(Op.GET_BOOKIE_INFO, 0, 9, b"\0"), "wrong length"),
    ("SUB_LEASE of no records", encode_sub_lease(9, "l", "s", "c", 0, 0), "0 records is invalid"),
    ("SUB_LEASE of too many records", encode_sub_lease(9, "l", "s", "c", MAX_SUB_LEASE + 1, 0), "records is invalid"),
    (
        "SUB_LEASE log name against the rules",
        pack_message(Op.SUB_LEASE, 0, 9, SUB_LEASE_AT.pack(4, 1, 1, 1, 0, 0), b"-bad", b"s", b"c"),
        "log name b'-bad' is invalid",
    ),
    ("SUB_LEASE name beyond the message", with_field(encode_sub_lease(9, "l", "s", "c", 1, 0), HEAD, "<B", 255), "name lengths"),
    (
        "SUB_LEASE consumer not UTF-8",
        pack_message(Op.SUB_LEASE, 0, 9, SUB_LEASE_AT.pack(1, 1, 1, 1, 0, 0), b"l", b"s", b"\xff"),
        "consumer id is not UTF-8",
    ),
    ("SUB_SETTLE counts beyond the limit", with_field(SETTLE, HEAD + 7, "<I", MAX_SUB_SETTLE), "is more than"),
    ("SUB_SETTLE counts beyond the message", with_field(SETTLE, HEAD + 7, "<I", 3), "wrong length for its counts"),
    ("SUB_SETTLE range backwards", joined(encode_sub_settle(9, "l", "s", "c", ack_ranges=[(5, 4)])), "is backwards"),
    ("SUB_LEAVE no consumer", resized(with_field(encode_sub_leave(9, "l", "s", "c"), HEAD + 2, "<B", 0), -1), "0 bytes"),
    ("SUB_STATS subscription name", with_field(encode_sub_stats(9, "l", "s"), HEAD + 3, "<B", ord("/")), "subscription name"),
    ("SUB_COMMIT no output", with_field(COMMIT, HEAD + 7, "<I", 0), "is invalid"),
    ("SUB_COMMIT ledgers beyond the message", with_field(COMMIT, HEAD + 24, "<I", 5), "shorter than an output"),
    ("SUB_COMMIT ledgers beyond the limit", with_field(COMMIT, HEAD + 24, "<I", 1 << 20), "at most"),
]


@pytest.mark.parametrize(("message", "why"), [(m, why) for _, m, why in BAD], ids=[name for name, _, _ in BAD])
def test_a_bad_message_is_refused_with_why_and_its_neighbours_are_served(message: bytes, why: str) -> None:
    before, bad, after = through_the_buffer(encode_bookie_info(1), message, encode_sync(2, 7))
    assert isinstance(bad, BadMessage) and why in bad.reason, bad
    assert not isinstance(before, BadMessage) and not isinstance(after, BadMessage)


def test_every_operation_has_bounds_of_its_own_here() -> None:
    assert {m[4] for _, m, _ in BAD if m[4] in OPERATIONS} == set(OPERATIONS)


OPS = sorted(OPERATIONS)
NAMES = [Op(op).name for op in OPS]
#: ADD's entry is the rest of its message: a byte more is a longer entry.
ENTRY_IS_THE_REST = {Op.ADD}
#: GET_BOOKIE_INFO never checked its flags, and bookies answer such requests: refusing them
#: now would refuse what older clients may send.
IGNORES_FLAGS = {Op.GET_BOOKIE_INFO}


def refused(message: bytes) -> BadMessage:
    before, bad, after = through_the_buffer(encode_bookie_info(1), message, encode_sync(2, 7))
    assert isinstance(bad, BadMessage), bad
    assert not isinstance(before, BadMessage) and not isinstance(after, BadMessage)
    return bad


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_every_operation_cut_short_is_refused(op: int) -> None:
    message = REQUESTS[op]
    for cut in range(HEAD, len(message)):
        assert refused(resized(message, cut - len(message))).request_id == 5


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_every_operation_with_a_byte_too_many_is_refused(op: int) -> None:
    longer = resized(REQUESTS[op], 1)
    if op in ENTRY_IS_THE_REST:
        (request,) = through_the_buffer(longer)
        assert type(request) is OPERATIONS[op].request
    else:
        assert "length" in refused(longer).reason


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_every_operation_with_unknown_flags_is_refused(op: int) -> None:
    flagged = with_field(REQUESTS[op], 5, "<B", 0x80)
    if op in IGNORES_FLAGS:
        (request,) = through_the_buffer(flagged)
        assert type(request) is OPERATIONS[op].request
    else:
        assert "flags" in refused(flagged).reason


WITH_LEDGER = [op for op in OPS if "ledger_id" in attrs.fields_dict(OPERATIONS[op].request)]


@pytest.mark.parametrize("op", WITH_LEDGER, ids=[Op(op).name for op in WITH_LEDGER])
def test_every_ledger_id_beyond_what_metadata_stores_hold_is_refused(op: int) -> None:
    (request,) = through_the_buffer(REQUESTS[op])
    assert request.ledger_id == struct.unpack_from("<Q", REQUESTS[op], HEAD)[0]  # type: ignore[attr-defined]
    assert "out of range" in refused(with_field(REQUESTS[op], HEAD, "<Q", MAX_LEDGER_ID + 1)).reason


@pytest.mark.parametrize("op", OPS, ids=NAMES)
def test_every_answer_cut_short_raises_or_is_its_rows_class(op: int) -> None:
    """A client never gets another exception than ProtocolError from a bookie's bytes, nor
    another class than the row's."""
    answer = ANSWERS[op]
    for cut in range(HEAD, len(answer) + 1):
        try:
            decoded = decode_responses(resized(answer, cut - len(answer)))
        except ProtocolError:
            continue
        assert [type(r) for r in decoded] == [OPERATIONS[op].response]


def test_a_broken_message_length_ends_the_frame_with_one_bad_message() -> None:
    lying = with_field(encode_sync(9, 1), 0, "<I", 2**31)  # says more than the frame holds
    out = through_the_buffer(encode_bookie_info(1), lying, encode_sync(2, 7))
    assert len(out) == 2 and isinstance(out[1], BadMessage) and "does not fit the frame" in out[1].reason
    frames = FrameBuffer()
    frames.feed(pack_frame([encode_bookie_info(1), b"\0" * 5]))  # a header cut short
    body = frames.next_frame()
    assert body is not None
    assert "truncated message header" in decode_requests(body, MAX_ENTRY)[1].reason  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (pack_message(Op.ADD, 77, 1, b"\0" * 24), "unknown status 77"),
        (pack_message(99, 0, 1), "unknown op code 99"),
        (pack_message(Op.ADD, 0, 1, b"\0" * 5), "bad ADD response"),
        (pack_message(Op.READ_BATCH, 0, 1, struct.pack("<QqI", 1, 0, 1000)), "shorter than its entry count"),
        (pack_message(Op.LIST_ENTRIES, 0, 1, struct.pack("<QBqI", 1, 0, -1, 1000)), "shorter than its run count"),
        (pack_message(Op.GET_BOOKIE_INFO, 0, 1, b"{not json"), "not JSON"),
        (pack_message(Op.ADD, 0, 1)[:-2], "truncated response header"),
    ],
)
def test_a_response_that_does_not_parse_raises(message: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        decode_responses(memoryview(message))


def test_an_error_answer_carries_its_status_and_why() -> None:
    (error,) = decode_responses(encode_error_response(4, Status.BAD_REQUEST, "what was wrong"))
    assert (error.op, error.request_id, error.status, error.message) == (Op.ERROR, 4, Status.BAD_REQUEST, "what was wrong")
