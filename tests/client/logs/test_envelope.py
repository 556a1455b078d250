"""The log record envelope on its own: what goes in comes out, byte for byte as documented,
and a corrupt or newer entry is refused with a message naming what is wrong."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bkframe
from bkframe import BadRecordError, Record, decode_record, encode_record
from bkframe.client.logs import envelope

TEXT = st.text(max_size=20)


@given(
    payload=st.binary(max_size=200),
    key=st.none() | st.binary(max_size=40),
    timestamp=st.none() | st.integers(min_value=0, max_value=2**62),
    properties=st.none() | st.dictionaries(TEXT, TEXT, max_size=5),
)
def test_every_record_round_trips(
    payload: bytes, key: bytes | None, timestamp: int | None, properties: dict[str, str] | None
) -> None:
    entry = encode_record(Record(payload, key, timestamp, properties), now=1_700_000_000_000)
    got = decode_record(entry)
    assert got.payload == payload and got.key == key
    assert got.timestamp == (timestamp if timestamp is not None else 1_700_000_000_000)
    assert got.event_time == (timestamp is not None)
    assert dict(got.properties) == (properties or {})
    assert len(entry) == len(payload) + envelope.overhead(key, properties)


def test_the_layout_is_the_documented_one() -> None:
    # A bare payload: flags 0, the timestamp, the payload (9 bytes of envelope).
    assert encode_record(b"hi", now=5) == b"\x00" + struct.pack("<q", 5) + b"hi"
    # Key, event time and one property, in the order docs/logs.md gives.
    entry = envelope.encode(b"p", b"k", 7, {"a": "bc"})
    assert entry == (
        bytes([envelope.KEY | envelope.PROPERTIES | envelope.EVENT_TIME]) + struct.pack("<q", 7)
        + struct.pack("<I", 1) + b"k"
        + struct.pack("<I", 1) + struct.pack("<I", 1) + b"a" + struct.pack("<I", 2) + b"bc"
        + b"p"
    )
    # An empty key is a key (not "no key").
    assert decode_record(encode_record(Record(b"x", key=b""), now=1)).key == b""


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (b"\x00\x01", "shorter than its 9-byte envelope"),
        (bytes([0x08]) + bytes(8) + b"x", "flags 0x08"),
        (bytes([envelope.KEY]) + bytes(8) + struct.pack("<I", 99) + b"abc", "key length 99 runs past"),
        (bytes([envelope.KEY]) + bytes(8) + b"\x01", "runs past its end"),
        (bytes([envelope.PROPERTIES]) + bytes(8) + struct.pack("<I", 2**31), "cannot hold them"),
        (bytes([envelope.PROPERTIES]) + bytes(8) + struct.pack("<II", 1, 50) + b"ab" + bytes(10), "property runs past"),
        (bytes([envelope.PROPERTIES]) + bytes(8) + struct.pack("<II", 1, 1) + b"\xff" + struct.pack("<I", 0), "not UTF-8"),
    ],
)
def test_a_bad_entry_is_refused_with_what_is_wrong(entry: bytes, says: str) -> None:
    with pytest.raises(BadRecordError, match=says):
        decode_record(entry)


def test_properties_must_be_text() -> None:
    with pytest.raises(TypeError, match="str to str"):
        encode_record(Record(b"x", properties={"n": 1}))  # type: ignore[dict-item]


def test_a_plain_record_costs_nine_bytes_and_the_names_are_public() -> None:
    assert envelope.overhead(None, None) == envelope.HEAD_SIZE == 9
    assert dict(bkframe.ENVELOPE_CUSTOM) == {"bkframe.log.format": "1"}
