"""The decoders of a frame's messages against random bytes, without a socket: messages of
every operation of proto/table.py cut, flipped, flagged and padded, among random headers
and noise. A bookie's decoder never raises and accounts for every message (a request of
its row's class, or a BadMessage with its request id); a client's raises only
ProtocolError. (What a running bookie does with bad frames: tests/bookie/test_malformed_input.py.)"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from bkframe.errors import ProtocolError
from bkframe.proto.base import BadMessage, ErrorResponse
from bkframe.proto.codes import MSG_HEADER
from bkframe.proto.table import OPERATIONS, decode_requests, decode_responses
from tests.proto.samples import ANSWERS, REFUSALS, REQUESTS

MAX_ENTRY = 1024
HEAD = MSG_HEADER.size


def with_length(message: bytes) -> bytes:
    return struct.pack("<I", len(message) - 4) + message[4:]


@st.composite
def mangled(draw: st.DrawFn, samples: list[bytes]) -> bytes:
    """One of ``samples``, as it is or changed the way a broken peer would."""
    message = bytearray(draw(st.sampled_from(samples)))
    at = draw(st.integers(0, len(message) - 1))
    how = draw(st.sampled_from(["as is", "cut", "cut, length kept", "flip", "flags", "field", "pad"]))
    if how == "cut":
        return with_length(bytes(message[: max(at, HEAD)]))
    if how == "cut, length kept":
        return bytes(message[:at])
    if how == "flip":
        message[at] ^= draw(st.integers(1, 255))
    elif how == "flags":
        message[5] = draw(st.integers(0, 255))
    elif how == "field" and len(message) >= HEAD + 8:
        value = draw(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1])))
        struct.pack_into("<Q", message, draw(st.integers(HEAD, len(message) - 8)), value)
    elif how == "pad":
        return with_length(bytes(message) + draw(st.binary(min_size=1, max_size=2 * MAX_ENTRY)))
    return bytes(message)


#: A message of any op (most unknown) whose length fits.
any_message = st.builds(
    lambda op, flags, rid, fields: struct.pack("<IBBQ", HEAD - 4 + len(fields), op, flags, rid) + fields,
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=64),
)
#: What may end a body: nothing, a header whose length does not fit, noise.
broken_end = st.one_of(
    st.just(b""),
    st.builds(
        lambda length, op, flags, rid, tail: struct.pack("<IBBQ", length, op, flags, rid) + tail,
        st.integers(0, 2**32 - 1),
        st.integers(0, 255),
        st.integers(0, 255),
        st.integers(0, 2**64 - 1),
        st.binary(max_size=64),
    ),
    st.binary(min_size=1, max_size=40),
)


def bodies(samples: list[bytes]) -> st.SearchStrategy[bytes]:
    """Messages one after the other (a cut whose length was kept ends the frame early)."""
    message = st.one_of(mangled(samples), mangled(samples), mangled(samples), any_message)
    return st.builds(lambda messages, end: b"".join(messages) + end, st.lists(message, max_size=8), broken_end)


def headers(body: bytes) -> list[tuple[int, int] | None]:
    """(op, request id) of each message the decoder reaches, None for one whose header or
    length does not fit (the decoder stops there)."""
    out: list[tuple[int, int] | None] = []
    pos = 0
    while pos < len(body):
        if len(body) - pos < HEAD:
            return [*out, None]
        length, op, _, request_id = MSG_HEADER.unpack_from(body, pos)
        if length < HEAD - 4 or pos + 4 + length > len(body):
            return [*out, None]
        out.append((op, request_id))
        pos += 4 + length
    return out


@settings(max_examples=400, deadline=None)
@given(body=bodies(list(REQUESTS.values())))
def test_a_bookie_decodes_any_bytes_into_requests_and_bad_messages(body: bytes) -> None:
    decoded = decode_requests(memoryview(body), MAX_ENTRY)
    expected = headers(body)
    assert len(decoded) == len(expected)
    for message, header in zip(decoded, expected):
        if header is None:
            assert isinstance(message, BadMessage)
            continue
        op, request_id = header
        assert message.request_id == request_id
        if not isinstance(message, BadMessage):
            assert type(message) is OPERATIONS[op].request
        elif op not in OPERATIONS:
            assert f"unknown op code {op}" in message.reason


@settings(max_examples=400, deadline=None)
@given(body=bodies([*ANSWERS.values(), *REFUSALS.values()]))
def test_a_client_decodes_any_bytes_into_answers_or_raises_protocol_error(body: bytes) -> None:
    try:
        decoded = decode_responses(body)
    except ProtocolError:
        return
    expected = headers(body)
    assert len(decoded) == len(expected) and None not in expected
    for answer, header in zip(decoded, expected):
        assert header is not None
        op, request_id = header
        assert answer.request_id == request_id
        assert type(answer) is (OPERATIONS[op].response if op in OPERATIONS else ErrorResponse)
