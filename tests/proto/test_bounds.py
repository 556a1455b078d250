"""Every bound a stranger's bytes can hit in a frame's messages, without a socket: each
bad message becomes a BadMessage saying what was wrong (the bookie answers it
BAD_REQUEST), and the good messages around it are still decoded. The client's side:
responses that do not parse raise ProtocolError. (Frames themselves: test_frames.py; the
same bounds against a running bookie: tests/bookie/test_malformed_input.py.)"""

from __future__ import annotations

import struct

import pytest

from bkframe.errors import ProtocolError
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import MAX_AUTH_CREDENTIAL, MAX_LEDGER_ID, MAX_READ_BATCH, Op, Status
from bkframe.proto.frames import FrameBuffer, pack_frame, pack_message
from bkframe.proto.ops.add import encode_add
from bkframe.proto.ops.add_batch import encode_add_batch
from bkframe.proto.ops.bookie_info import encode_bookie_info
from bkframe.proto.ops.connection_setup import encode_auth
from bkframe.proto.ops.list_entries import encode_list_entries
from bkframe.proto.ops.read import encode_read
from bkframe.proto.ops.read_batch import encode_read_batch
from bkframe.proto.ops.sync import encode_sync
from bkframe.proto.table import decode_requests, decode_responses, encode_error_response

MAX_ENTRY = 1024
KEY = b"k" * 8


def joined(parts: bytes | list[bytes]) -> bytes:
    return parts if isinstance(parts, bytes) else b"".join(parts)


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
    ("READ_BATCH span", encode_read_batch(9, 1, 0, MAX_READ_BATCH, 1 << 20), "is invalid"),
    ("READ_BATCH step 0", encode_read_batch(9, 1, 0, 5, 1 << 20, 0), "step 0"),
    ("READ_BATCH no bytes", encode_read_batch(9, 1, 0, 5, 0), "(0 bytes) is invalid"),
    ("LIST_ENTRIES backwards", encode_list_entries(9, 1, 5, 2), "range 5..2 is invalid"),
    ("SYNC wrong length", resized(encode_sync(9, 1), 1), "SYNC message has the wrong length"),
    ("AUTH method too long", encode_auth(9, "m" * 256, b""), "method length"),
    ("AUTH credential too long", encode_auth(9, "token", b"c" * (MAX_AUTH_CREDENTIAL + 1)), "credential length"),
    ("GET_BOOKIE_INFO with fields", pack_message(Op.GET_BOOKIE_INFO, 0, 9, b"\0"), "wrong length"),
]


@pytest.mark.parametrize(("message", "why"), [(m, why) for _, m, why in BAD], ids=[name for name, _, _ in BAD])
def test_a_bad_message_is_refused_with_why_and_its_neighbours_are_served(message: bytes, why: str) -> None:
    before, bad, after = through_the_buffer(encode_bookie_info(1), message, encode_sync(2, 7))
    assert isinstance(bad, BadMessage) and why in bad.reason, bad
    assert not isinstance(before, BadMessage) and not isinstance(after, BadMessage)


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
